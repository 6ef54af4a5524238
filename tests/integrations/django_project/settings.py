"""The smallest Django project that runs Harvest (tests/integrations/test_django.py)."""

SECRET_KEY = "tests-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
INSTALLED_APPS = ["harvest.integrations.django"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "django_project.urls"
DATABASES: dict[str, dict[str, str]] = {}
USE_TZ = True
# None: Django leaves the process's TZ alone (any name sets os.environ["TZ"] and calls tzset(),
# which would change local time for every test after this one in the pytest process).
TIME_ZONE = None
# The database comes from HARVEST_DATABASE_URL, or the tests' override_settings.
HARVEST = {
    "app": "django_project.workflows.app",
    "worker": {"concurrency": 4, "shutdown_grace": 5.0},
}
