import os

from django.core.wsgi import get_wsgi_application

from portal.runtime import settle_gc

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
application = get_wsgi_application()
settle_gc()  # the loaded app out of the cyclic collector's way (portal/runtime.py)
