"""The ``dpsense`` subcommands, one module per area; ``cloud.cli`` holds the table."""
