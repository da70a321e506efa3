"""The `karma` command."""
