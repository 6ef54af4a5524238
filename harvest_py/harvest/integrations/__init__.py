"""Harvest inside a web framework's process (a face, like the CLI and the web API).

- :mod:`harvest.integrations.starlette`: a lifespan for Starlette and FastAPI apps that opens a
  client with the app, optionally runs a worker beside it, and mounts the management API;
  :mod:`harvest.integrations.fastapi` adds the ``HarvestClient`` dependency.
- :mod:`harvest.integrations.django`: an app config, ``settings.HARVEST``, ``manage.py
  harvest_worker`` and :func:`~harvest.integrations.django.get_client` for views.

Each module needs its framework (``pip install 'harvest-workflows[fastapi]'`` or ``[django]``);
``import harvest`` imports none of them. docs/integrations.md is the guide.
"""
