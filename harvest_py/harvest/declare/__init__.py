"""What users declare: ``@workflow``, ``@activity``, ``App``, ``RetryPolicy``, ``@query`` /
``@update`` handlers and flow-control policies. Imports only ``harvest.core``."""
