// gocheck runs, with Go's standard library, the rules binlake shares with TiDB Binlog, so that tests can
// hold binlake's answers against Go's (tests/drain/test_filters.py, tests/ingest/test_encrypt.py):
//
//	gocheck filter             for each "pattern<TAB>name" line on stdin: "1", "0" or "error: <why>" —
//	                           the drainer's filter rule for one pattern: the name lower-cased; "~re" is
//	                           the case-insensitive regex re found anywhere, any other pattern the
//	                           case-insensitive regex "^pattern$"
//	gocheck encrypt KEY TEXT   TEXT as encrypted_password: base64(IV + "@" + AES-CFB(KEY, IV, TEXT)), KEY hex
//	gocheck decrypt KEY B64    the text such a value holds
package main

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
)

func filter() {
	in := bufio.NewScanner(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		pattern, name, _ := strings.Cut(in.Text(), "\t")
		expr := "(?i)^" + pattern + "$"
		if strings.HasPrefix(pattern, "~") {
			expr = "(?i)" + pattern[1:]
		}
		re, err := regexp.Compile(expr)
		switch {
		case err != nil:
			fmt.Fprintf(out, "error: %v\n", err)
		case re.MatchString(strings.ToLower(name)):
			fmt.Fprintln(out, "1")
		default:
			fmt.Fprintln(out, "0")
		}
	}
}

func block(keyHex string) (cipher.Block, error) {
	key, err := hex.DecodeString(keyHex)
	if err != nil {
		return nil, err
	}
	return aes.NewCipher(key)
}

func encrypt(keyHex, text string) (string, error) {
	b, err := block(keyHex)
	if err != nil {
		return "", err
	}
	iv := make([]byte, b.BlockSize())
	if _, err := rand.Read(iv); err != nil {
		return "", err
	}
	body := make([]byte, len(text))
	cipher.NewCFBEncrypter(b, iv).XORKeyStream(body, []byte(text))
	raw := append(append(append([]byte{}, iv...), '@'), body...)
	return base64.StdEncoding.EncodeToString(raw), nil
}

func decrypt(keyHex, b64 string) (string, error) {
	b, err := block(keyHex)
	if err != nil {
		return "", err
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", err
	}
	n := b.BlockSize()
	if len(raw) < n+1 || !bytes.Equal(raw[n:n+1], []byte("@")) {
		return "", errors.New("not IV + '@' + ciphertext")
	}
	body := make([]byte, len(raw)-n-1)
	cipher.NewCFBDecrypter(b, raw[:n]).XORKeyStream(body, raw[n+1:])
	return string(body), nil
}

func main() {
	var out string
	var err error
	switch {
	case len(os.Args) == 2 && os.Args[1] == "filter":
		filter()
		return
	case len(os.Args) == 4 && os.Args[1] == "encrypt":
		out, err = encrypt(os.Args[2], os.Args[3])
	case len(os.Args) == 4 && os.Args[1] == "decrypt":
		out, err = decrypt(os.Args[2], os.Args[3])
	default:
		err = errors.New("usage: gocheck filter | encrypt KEY TEXT | decrypt KEY B64")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(out)
}
