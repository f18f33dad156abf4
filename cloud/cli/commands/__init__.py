"""The ``dpsense`` subcommands, one module per area; ``dpsense.cloud.cli`` holds the table."""
