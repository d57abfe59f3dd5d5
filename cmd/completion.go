package cmd

import (
	"github.com/spf13/cobra"
)

// completionShells are the shells fetch completion writes a script for.
var completionShells = []string{"bash", "zsh", "fish", "powershell"}

// NewCmdCompletion returns the completion command, which prints the
// completion script of root for a shell with cobra's generators. It takes
// the place of cobra's default completion command, so that a wrong shell is
// a usage error (exit 2) as everywhere else.
func NewCmdCompletion(ios *IOStreams, root *cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "Print the shell completion script",
		Long: `completion prints the script that makes a shell complete fetch's commands and
flags. For example:

  bash:        source <(fetch completion bash)
  zsh:         fetch completion zsh > "${fpath[1]}/_fetch"
  fish:        fetch completion fish > ~/.config/fish/completions/fetch.fish
  powershell:  fetch completion powershell | Out-String | Invoke-Expression`,
		ValidArgs:             completionShells,
		DisableFlagsInUseLine: true,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("completion: give one shell: bash, zsh, fish or powershell")
			}
			return nil
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(_ *cobra.Command, args []string) error {
			out := ios.Out
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(out, true)
			case "zsh":
				return root.GenZshCompletion(out)
			case "fish":
				return root.GenFishCompletion(out, true)
			case "powershell":
				return root.GenPowerShellCompletionWithDesc(out)
			}
			return usageErrorf("completion: unknown shell %q: want bash, zsh, fish or powershell", args[0])
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	return cmd
}
