"""The ``cuebench`` command: one subcommand group per package."""
