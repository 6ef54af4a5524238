"""The HTTP face of Harvest: the management API, its event streams and the dashboard.

A face like the CLI: handlers call the SQL API (``harvest.db``) and the shard pools, and hold no
engine logic. Importing ``harvest.web`` needs the ``web`` extra (Starlette); ``import harvest``
does not.
"""
