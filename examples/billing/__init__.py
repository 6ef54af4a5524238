"""The billing app: a FastAPI service whose checkouts are durable Harvest workflows.

``python -m examples.billing`` serves it on the embedded PostgreSQL (README.md beside this file).
"""
