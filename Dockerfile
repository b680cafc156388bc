# The ackledger image: the ledger and sink services, the relays (HTTP, RabbitMQ, NATS), the
# broker consumers and the worker
# (`ackledger deliver`), on SQLite or PostgreSQL (the postgres extra: psycopg with its libpq).
# Build from the repository root:  docker build -t localhost/ackledger:0.1.0 .
# (the name the manifests in deploy/k8s run: built here, not pulled; push it to your own
# registry under your name and change the manifests to match).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install ".[server,postgres,amqp,nats]" && rm -rf /src

# A fixed non-root uid, so the manifests can say runAsUser: 10001 and runAsNonRoot.
RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin ackledger \
    && mkdir /data && chown 10001:10001 /data
USER 10001
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8080

ENTRYPOINT ["ackledger"]
# Listening beyond loopback needs a bearer token (CONTRACT v2 section 9): mount one, e.g.
#   docker run -v "$PWD/token:/etc/ackledger/token/token:ro" -p 8080:8080 ackledger:0.1.0
# (the Kubernetes manifests mount the Secret ackledger-token there).
CMD ["serve", "ledger", "--db", "/data/ledger.db", "--host", "0.0.0.0", "--port", "8080", \
     "--token-file", "/etc/ackledger/token/token"]
