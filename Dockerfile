# Airflow 3.3 with this project installed, plus a JRE for Spark. docker-compose.yml runs every Airflow
# component from this image, and also the Spark worker (the plan job's executors import `planner`
# and need the same Python as the driver, which the official Spark image's Python is not) and the
# traffic generator (the dev tools' distribution, devtools/).
ARG AIRFLOW_VERSION=3.3.2
ARG PYTHON_VERSION=3.11
FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION}
ARG AIRFLOW_VERSION

USER root
# Spark 4 needs Java 17 or newer: Debian's default JRE is 17 on bookworm and 21 on trixie.
RUN apt-get update \
    && apt-get install --yes --no-install-recommends default-jre-headless procps \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/default-java
# The planner's home (samples, plan job files, archives) is a volume shared by Airflow and the Spark
# worker; created here so that a fresh named volume takes the airflow user's ownership.
RUN mkdir -p /opt/pulsar-rebalance/home \
    && chown -R airflow:0 /opt/pulsar-rebalance \
    && chmod -R g+rwX /opt/pulsar-rebalance
USER airflow

# Dependencies first, in their own layer, so that a change to the source does not download pyspark again.
COPY --chown=airflow:0 pyproject.toml constraints.txt /tmp/pulsar-rebalance/
COPY --chown=airflow:0 devtools/pyproject.toml /tmp/pulsar-rebalance/devtools/
# The package's requirements and those of its airflow, spark and postgres extras, and the dev tools' own
# (pulsar-client, for the traffic generator) except the package itself.
RUN python -c "import tomllib; load = lambda path: tomllib.load(open(path, 'rb'))['project']; \
project, devtools = load('/tmp/pulsar-rebalance/pyproject.toml'), load('/tmp/pulsar-rebalance/devtools/pyproject.toml'); \
extras = ('airflow', 'spark', 'postgres'); \
print('\n'.join(project['dependencies'] + [r for e in extras for r in project['optional-dependencies'][e]] \
+ [r for r in devtools['dependencies'] if not r.startswith(project['name'])]))" \
        > /tmp/pulsar-rebalance/requirements.txt \
    && pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" -r /tmp/pulsar-rebalance/requirements.txt \
        -c /tmp/pulsar-rebalance/constraints.txt

COPY --chown=airflow:0 . /opt/airflow/pulsar-rebalance
# The product, and the dev tools beside it for the traffic generator (docker-compose.yml's `traffic` profile).
RUN pip install --no-cache-dir --no-deps /opt/airflow/pulsar-rebalance /opt/airflow/pulsar-rebalance/devtools \
    && python -c "import planner, spark_jobs, pulsar_rebalance_devtools, pyspark; print('pyspark', pyspark.__version__)"

ENV PULSAR_REBALANCE_HOME=/opt/pulsar-rebalance/home \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/airflow/pulsar-rebalance/dags \
    AIRFLOW__CORE__PLUGINS_FOLDER=/opt/airflow/pulsar-rebalance/plugins \
    AIRFLOW__CORE__LOAD_EXAMPLES=False
