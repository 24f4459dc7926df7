FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY evalhub evalhub
COPY jobs jobs
COPY traces traces
COPY frontend frontend
COPY manage.py ./
RUN pip install --no-cache-dir . && python manage.py collectstatic --noinput -v 0
EXPOSE 8000
CMD ["python", "-m", "evalhub.webserver", "--host", "0.0.0.0", "--port", "8000", "--workers", "1"]
