FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 CARDPOOL_VAR_DIR=/var/lib/cardpool
WORKDIR /app
COPY pyproject.toml README.md ./
COPY portal ./portal
COPY inventory ./inventory
COPY leasing ./leasing
# The kubernetes extra: the client the kubernetes backend talks to the cluster with.
RUN pip install --no-cache-dir ".[kubernetes]"
COPY . .
RUN CARDPOOL_SECRET_KEY=$(python -c "import secrets; print(secrets.token_hex(32))") \
    python manage.py collectstatic --no-input -v 0
RUN useradd --system cardpool && mkdir -p /var/lib/cardpool && chown cardpool /var/lib/cardpool
USER cardpool
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi", "--bind", "0.0.0.0:8000", "--workers", "4", "--access-logfile", "-"]
