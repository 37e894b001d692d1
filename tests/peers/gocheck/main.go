// gocheck runs, with Go's standard library and (eventfilter) the tidb-tools and TiDB parser packages TiDB
// Binlog uses, the rules binlake shares with TiDB Binlog, so that tests can hold binlake's answers against
// Go's (tests/drain/test_filters.py, tests/drain/test_event_filter.py, tests/ingest/test_encrypt.py):
//
//	gocheck filter             for each "pattern<TAB>name" line on stdin: "1", "0" or "error: <why>" —
//	                           the drainer's filter rule for one pattern: the name lower-cased; "~re" is
//	                           the case-insensitive regex re found anywhere, any other pattern the
//	                           case-insensitive regex "^pattern$"
//	gocheck encrypt KEY TEXT   TEXT as encrypted_password: base64(IV + "@" + AES-CFB(KEY, IV, TEXT)), KEY hex
//	gocheck decrypt KEY B64    the text such a value holds
//	gocheck eventfilter        the drainer's [syncer.binlog-filter-rule] decisions, by tidb-tools'
//	                           binlog-filter at the version TiDB Binlog v8.3.0 pins, and TiDB's parser
//	                           (tests/drain/test_event_filter.py): stdin's first line is a JSON
//	                           {"case-sensitive", "binlog-filter-rule": {NAME: {"ignore-event", "ignore-sql"}},
//	                           "table-migrate-rule": [{"schema", "table", "binlog-filter-rule": [NAME…]}]}, each
//	                           further line a JSON {"schema", "table", "event"} for a row change or {"schema",
//	                           "table", "query"} for a DDL; the answer is one line for the rules ("ok" or
//	                           "error: <why>"), then per event "1" (ignored) or "0", and for a DDL a tab and
//	                           the event type TiDB's parser gives its query, or "error: <why>"
package main

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	bf "github.com/pingcap/tidb-tools/pkg/binlog-filter"
	"github.com/pingcap/tidb/parser"
	_ "github.com/pingcap/tidb/parser/test_driver"
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

type filterRule struct {
	IgnoreEvent []string `json:"ignore-event"`
	IgnoreSQL   []string `json:"ignore-sql"`
}

type migrateRule struct {
	Schema string   `json:"schema"`
	Table  string   `json:"table"`
	Rules  []string `json:"binlog-filter-rule"`
}

type filterConfig struct {
	CaseSensitive bool                  `json:"case-sensitive"`
	Rules         map[string]filterRule `json:"binlog-filter-rule"`
	Migrate       []migrateRule         `json:"table-migrate-rule"`
}

type filterEvent struct {
	Schema string  `json:"schema"`
	Table  string  `json:"table"`
	Event  string  `json:"event"`
	Query  *string `json:"query"`
}

// eventRules builds the drainer's binlog event filter from its two keys as TiDB Binlog v8.3.0 does
// (drainer/util.go): each named rule ignores its events and SQL patterns on the tables of every
// table-migrate-rule naming it, and the rules of one schema/table pattern pair are one rule.
func eventRules(cfg filterConfig) (*bf.BinlogEvent, error) {
	type key struct{ schema, table string }
	combined := map[key]*bf.BinlogEventRule{}
	var order []key
	for _, m := range cfg.Migrate {
		for _, name := range m.Rules {
			r, ok := cfg.Rules[name]
			if !ok {
				return nil, fmt.Errorf("event filter rule name %s not found", name)
			}
			k := key{m.Schema, m.Table}
			c, ok := combined[k]
			if !ok {
				c = &bf.BinlogEventRule{Action: bf.Ignore, SchemaPattern: m.Schema, TablePattern: m.Table}
				combined[k] = c
				order = append(order, k)
			}
			for _, e := range r.IgnoreEvent {
				c.Events = append(c.Events, bf.EventType(e))
			}
			c.SQLPattern = append(c.SQLPattern, r.IgnoreSQL...)
		}
	}
	rules := make([]*bf.BinlogEventRule, 0, len(order))
	for _, k := range order {
		rules = append(rules, combined[k])
	}
	return bf.NewBinlogEvent(cfg.CaseSensitive, rules)
}

// eventFilter answers the drainer's skip decision for each event read from stdin: a row change by its
// type (drainer/syncer.go skipDMLEvent), a DDL by the type TiDB's parser gives its query, else by
// its query alone (skipDDLEvent).
func eventFilter() error {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	if !in.Scan() {
		return errors.New("eventfilter: no rules line")
	}
	var cfg filterConfig
	if err := json.Unmarshal(in.Bytes(), &cfg); err != nil {
		return err
	}
	filter, err := eventRules(cfg)
	if err != nil {
		fmt.Fprintf(out, "error: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return nil
	}
	fmt.Fprintln(out, "ok")
	p := parser.New()
	for in.Scan() {
		var ev filterEvent
		if err := json.Unmarshal(in.Bytes(), &ev); err != nil {
			return err
		}
		et, query, suffix := bf.EventType(ev.Event), "", ""
		if ev.Query != nil {
			query = *ev.Query
			et = bf.NullEvent
			if stmt, err := p.ParseOneStmt(query, "", ""); err == nil {
				et = bf.AstToDDLEvent(stmt)
			}
			suffix = "\t" + string(et)
		}
		action, err := filter.Filter(ev.Schema, ev.Table, et, query)
		switch {
		case err != nil:
			fmt.Fprintf(out, "error: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		case action == bf.Ignore:
			fmt.Fprintln(out, "1"+suffix)
		default:
			fmt.Fprintln(out, "0"+suffix)
		}
	}
	return in.Err()
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
	case len(os.Args) == 2 && os.Args[1] == "eventfilter":
		if err = eventFilter(); err == nil {
			return
		}
	case len(os.Args) == 4 && os.Args[1] == "encrypt":
		out, err = encrypt(os.Args[2], os.Args[3])
	case len(os.Args) == 4 && os.Args[1] == "decrypt":
		out, err = decrypt(os.Args[2], os.Args[3])
	default:
		err = errors.New("usage: gocheck filter | eventfilter | encrypt KEY TEXT | decrypt KEY B64")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(out)
}
