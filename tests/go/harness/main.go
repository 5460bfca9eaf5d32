// Command harness is the Go SDK suite's helper (see ../run.sh): `front` stands in for the
// namespace's one host name in front of Tidebus's AMQP and administration listeners,
// `report` reads `go test -json` output and prints per-file passed / failed / skipped counts,
// and run as `az` (a link) it stands in for the Azure CLI that the suite's credential asks
// for tokens.
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	if filepath.Base(os.Args[0]) == "az" { // run.sh links bin/az to this program
		if err := fakeAz(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "ERROR:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: harness front|progress|report [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "front":
		err = front(os.Args[2:])
	case "progress":
		err = progress(os.Args[2:])
	case "report":
		var failed bool
		failed, err = report(os.Args[2:])
		if err == nil && failed {
			os.Exit(1)
		}
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		os.Exit(2)
	}
}
