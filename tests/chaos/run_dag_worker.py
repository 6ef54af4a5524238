"""run_worker.py with the DAG chaos App (dag_apps.py): ``python tests/chaos/run_dag_worker.py [options]``."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dag_apps
import run_worker

if __name__ == "__main__":
    run_worker.app = dag_apps.app
    run_worker.main()
