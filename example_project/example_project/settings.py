"""Settings of the example project.

SQLite by default, set up for workers and web requests sharing one file (WAL,
IMMEDIATE transactions, a busy timeout). Set DATABASE_URL to use PostgreSQL
(``postgres://user@host:5432/name``) or MySQL/MariaDB (``mysql://...``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent

# Development defaults; a deployed site reads its secret from the environment.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-not-for-production")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_workers",
    "shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# Workers keep their connections open (CONN_MAX_AGE); closing and reopening
# one per query costs about half of a worker's throughput.
CONN_MAX_AGE = 600


def database_from_environment() -> dict[str, Any]:
    """SQLite unless DATABASE_URL names another database."""
    url = os.environ.get("DATABASE_URL")
    if not url:
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": BASE_DIR / "db.sqlite3",
            "CONN_MAX_AGE": CONN_MAX_AGE,
            "OPTIONS": {
                # One writer at a time: take the write lock when a transaction
                # begins, wait for it instead of failing, and let readers run
                # beside the writer (WAL).
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL;",
            },
        }
    import dj_database_url

    db = dj_database_url.parse(url, conn_max_age=CONN_MAX_AGE, conn_health_checks=True)
    if db["ENGINE"] == "django.db.backends.mysql":
        import pymysql

        pymysql.install_as_MySQLdb()  # PyMySQL stands in for mysqlclient
        db.setdefault("OPTIONS", {}).update(
            {"charset": "utf8mb4", "isolation_level": "read committed"}
        )
    return db


DATABASES = {"default": database_from_environment()}
if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    # Task ids may be 266 characters. MySQL 8 and MariaDB 10.6+ index that much
    # (utf8mb4 with DYNAMIC rows allows 3072 bytes), so Django's caution does not apply.
    SILENCED_SYSTEM_CHECKS = ["mysql.W003"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
# The reports page asks who you are (django.contrib.auth's login view, any user).
LOGIN_URL = "login"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
}

# Django's own task framework: every @task's .enqueue() is stored as a task
# record and run by runworkers.
TASKS = {
    "default": {
        "BACKEND": "django_workers.backends.WorkersBackend",
        "QUEUES": ["default", "emails", "reports"],
    }
}

DJANGO_WORKERS = {
    # Receipts go out one at a time, in the order they were submitted, however
    # many workers run (a sequential queue).
    "QUEUES": {"emails": {"concurrency": 1}},
    # Periodic tasks: every runworkers process runs the scheduler, and each
    # tick is enqueued once however many run (docs/periodic-tasks.md).
    "SCHEDULES": {
        "refresh-rates": {"task": "shop.tasks.refresh_exchange_rates", "cron": "*/15 * * * *"},
        # Every 2 seconds, so that the demo sees it fire.
        "ping-monitoring": {"task": "shop.tasks.ping_monitoring", "every": 2},
    },
}
