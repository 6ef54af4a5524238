"""A standalone worker service: a config file, ``harvest worker`` as the entry point, a graceful
drain on SIGTERM, and a client that starts the work (README.md)."""
