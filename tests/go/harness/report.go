package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// event is one line of `go test -json` (test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

type result struct {
	file, pkg, name string
	status          string // pass, fail, skip, or "" (never finished)
	output          []string
	elapsed         float64
	subtests        int // subtests that finished, and how many of them skipped
	skippedSubtests int
}

// report prints, per test file, how many top-level tests passed, failed and were skipped,
// then each failure's key output lines and each skip's reason, and as its last line
// "N passed, N failed, N skipped". A package that failed without a failing test (a build
// error, a TestMain that exited, a panic between tests) counts as one failure named after it.
// It returns whether anything failed.
func report(args []string) (bool, error) {
	flags := flag.NewFlagSet("report", flag.ExitOnError)
	src := flags.String("src", "", "the module's source (to find each test's file)")
	jsonPath := flags.String("json", "", "go test -json output")
	failuresPath := flags.String("failures", "", "write each failing test's full output here")
	_ = flags.Parse(args)

	module, files, err := testFiles(*src)
	if err != nil {
		return false, err
	}
	in, err := os.Open(*jsonPath)
	if err != nil {
		return false, err
	}
	defer in.Close()

	results := map[string]*result{} // pkg + "\x00" + test
	var order []string
	pkgOutput := map[string][]string{}
	pkgStatus := map[string]string{}
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 1<<20), 1<<24)
	for scanner.Scan() {
		var e event
		if json.Unmarshal(scanner.Bytes(), &e) != nil {
			continue // a line go printed that is not an event
		}
		top, _, _ := strings.Cut(e.Test, "/")
		if e.Test == "" {
			switch e.Action {
			case "output":
				pkgOutput[e.Package] = append(pkgOutput[e.Package], e.Output)
			case "pass", "fail", "skip":
				pkgStatus[e.Package] = e.Action
			}
			continue
		}
		key := e.Package + "\x00" + top
		r := results[key]
		if r == nil {
			rel := strings.TrimPrefix(strings.TrimPrefix(e.Package, module), "/")
			file := files[rel+"\x00"+top]
			if file == "" {
				file = filepath.Join(rel, "?")
			}
			r = &result{file: file, pkg: rel, name: top}
			results[key] = r
			order = append(order, key)
		}
		switch e.Action {
		case "output":
			r.output = append(r.output, e.Output)
		case "pass", "fail", "skip":
			if e.Test == top {
				r.status, r.elapsed = e.Action, e.Elapsed
			} else {
				r.subtests++
				if e.Action == "skip" {
					r.skippedSubtests++
				}
			}
		}
	}
	if err := scanner.Err(); err != nil {
		return false, err
	}

	type counts struct{ pass, fail, skip int }
	perFile := map[string]*counts{}
	var fileOrder []string
	var failed, skipped []*result
	total := counts{}
	add := func(file string) *counts {
		c := perFile[file]
		if c == nil {
			c = &counts{}
			perFile[file] = c
			fileOrder = append(fileOrder, file)
		}
		return c
	}
	failedPkgs := map[string]bool{}
	for _, key := range order {
		r := results[key]
		c := add(r.file)
		if r.status == "pass" && r.subtests > 0 && r.skippedSubtests == r.subtests {
			r.status = "skip" // go passes a test whose every subtest skipped: it tested nothing
		}
		switch r.status {
		case "pass":
			c.pass++
			total.pass++
		case "skip":
			c.skip++
			total.skip++
			skipped = append(skipped, r)
		default: // fail, or never finished (the package's binary died under it)
			c.fail++
			total.fail++
			failed = append(failed, r)
			failedPkgs[r.pkg] = true
		}
	}
	var pkgs []string
	for pkg := range pkgStatus {
		pkgs = append(pkgs, pkg)
	}
	sort.Strings(pkgs)
	for _, pkg := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		if pkgStatus[pkg] == "fail" && !failedPkgs[rel] {
			r := &result{file: filepath.Join(rel, "(package)"), pkg: rel, name: "(package " + rel + ")",
				status: "fail", output: pkgOutput[pkg]}
			add(r.file).fail++
			total.fail++
			failed = append(failed, r)
		}
	}

	sort.Strings(fileOrder)
	fmt.Printf("%-55s %6s %6s %6s\n", "file", "passed", "failed", "skipped")
	for _, f := range fileOrder {
		c := perFile[f]
		fmt.Printf("%-55s %6d %6d %6d\n", f, c.pass, c.fail, c.skip)
	}
	if len(skipped) > 0 {
		fmt.Println("\nskipped by the suite itself (its own t.Skip):")
		for _, r := range skipped {
			fmt.Printf("  %s %s: %s\n", r.file, r.name, skipReason(r.output))
		}
	}
	var full *os.File
	if *failuresPath != "" && len(failed) > 0 {
		if full, err = os.Create(*failuresPath); err != nil {
			return false, err
		}
		defer full.Close()
	}
	if len(failed) > 0 {
		fmt.Println("\nfailed:")
		for _, r := range failed {
			state := "failed"
			if r.status == "" {
				state = "did not finish"
			}
			fmt.Printf("  %s %s (%s, %.1fs)\n", r.file, r.name, state, r.elapsed)
			for _, line := range keyLines(r.output, 12) {
				fmt.Printf("      %s\n", line)
			}
			if full != nil {
				fmt.Fprintf(full, "=== %s %s (%s)\n%s\n", r.file, r.name, state, strings.Join(r.output, ""))
			}
		}
		if full != nil {
			fmt.Printf("(full output of each failure: %s)\n", *failuresPath)
		}
	}
	fmt.Printf("\n%d passed, %d failed, %d skipped\n", total.pass, total.fail, total.skip)
	return total.fail > 0, nil
}

// testFiles maps "dir\x00TestName" to the test file (relative to src) declaring it.
func testFiles(src string) (string, map[string]string, error) {
	gomod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		return "", nil, err
	}
	module := ""
	for _, line := range strings.Split(string(gomod), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			module = strings.TrimSpace(rest)
		}
	}
	files := map[string]string{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(src, path)
		dir := filepath.Dir(rel)
		if dir == "." {
			dir = ""
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil {
				files[dir+"\x00"+fn.Name.Name] = rel
			}
		}
		return nil
	})
	return module, files, err
}

// skipReason is the message the test skipped with: the output line before "--- SKIP".
func skipReason(output []string) string {
	var last string
	for _, line := range output {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "--- SKIP") {
			break
		}
		if line != "" && !strings.HasPrefix(line, "=== ") {
			last = line
		}
	}
	return last
}

// keyLines picks what says why a test failed: testify's Error and Messages lines, panics,
// and the FAIL lines of its subtests; at most max lines.
func keyLines(output []string, max int) []string {
	var picked []string
	for i, line := range output {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "Error:") || strings.HasPrefix(t, "Messages:") ||
			strings.HasPrefix(t, "panic:") || strings.HasPrefix(t, "--- FAIL") ||
			strings.Contains(t, "test timed out") {
			if strings.HasPrefix(t, "Error:") && i+1 < len(output) {
				next := strings.TrimSpace(output[i+1])
				if next != "" && !strings.HasPrefix(next, "Test:") && !strings.HasPrefix(next, "Messages:") {
					t += " " + next
				}
			}
			if len(t) > 400 {
				t = t[:400] + "..."
			}
			picked = append(picked, t)
		}
		if len(picked) >= max {
			break
		}
	}
	return picked
}
