"""Plan review and audit pages, served by the Airflow plugin in plugins/."""
