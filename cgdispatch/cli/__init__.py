"""Command line: argument parsing and printing, one module per command group."""
