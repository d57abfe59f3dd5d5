// Command fetch fetches lists of URLs through pools of forward proxies. See
// README.md and the package cmd for the command line.
package main

import (
	"os"

	"github.com/fetch-dev/fetch/cmd"
)

func main() { os.Exit(cmd.Main()) }
