package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
)

// progress copies `go test -json` from stdin to -out and prints one line per finished
// top-level test (and per finished package), so a long run shows where it is.
func progress(args []string) error {
	flags := flag.NewFlagSet("progress", flag.ExitOnError)
	outPath := flags.String("out", "", "where the JSON goes")
	_ = flags.Parse(args)
	out, err := os.Create(*outPath)
	if err != nil {
		return err
	}
	defer out.Close()
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 1<<24)
	for scanner.Scan() {
		line := scanner.Bytes()
		if _, err := out.Write(append(line, '\n')); err != nil {
			return err
		}
		var e event
		if json.Unmarshal(line, &e) != nil {
			fmt.Printf("%s\n", line) // go's own words (a build error)
			continue
		}
		if e.Action != "pass" && e.Action != "fail" && e.Action != "skip" {
			continue
		}
		pkg := e.Package[strings.LastIndex(e.Package, "/")+1:]
		switch {
		case e.Test == "":
			fmt.Printf("%s package %s (%.0fs)\n", strings.ToUpper(e.Action), e.Package, e.Elapsed)
		case !strings.Contains(e.Test, "/"):
			fmt.Printf("--- %s: %s [%s] (%.2fs)\n", strings.ToUpper(e.Action), e.Test, pkg, e.Elapsed)
		}
	}
	return scanner.Err()
}
