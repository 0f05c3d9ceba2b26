from planner.airflow.dags import *  # noqa: F403 - the pulsar-rebalance DAGs (planner/airflow/dags.py)
