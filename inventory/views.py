"""Browser pages for the inventory (filled in by the next commit)."""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse


@login_required
def catalogue(request):
    return HttpResponse()


@login_required
def card_model_detail(request, slug):
    return HttpResponse()


@login_required
def node_list(request):
    return HttpResponse()


@login_required
def node_detail(request, hostname):
    return HttpResponse()
