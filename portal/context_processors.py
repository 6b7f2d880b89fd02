from django.conf import settings


def site(request):
    """Values every page needs: the site's time zone and the user's site roles."""
    user = getattr(request, "user", None)
    profile = getattr(user, "profile", None) if user is not None and user.is_authenticated else None
    return {
        "SITE_TIME_ZONE": settings.TIME_ZONE,
        "currency": settings.CARDPOOL_CURRENCY,
        "is_operator": bool(profile and profile.is_operator) or bool(user and user.is_superuser),
        "is_finance": bool(profile and profile.is_finance),
    }
