"""One module per ``rlm`` subcommand: argument parsing and output; the work is in the layers below."""
