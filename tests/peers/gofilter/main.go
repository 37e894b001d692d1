// gofilter answers, for each "pattern<TAB>name" line on stdin, whether TiDB Binlog's drainer rule for
// one filter pattern matches the name, with Go's regexp engine: the name is lower-cased; "~re" is the
// case-insensitive regex re found anywhere in it, any other pattern the case-insensitive regex
// "^pattern$". It prints "1", "0", or "error: <why>" per line (tests/drain/test_filters.py).
package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

func main() {
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
