"""``path("", include("ackledger.django.urls"))``: ``POST /events`` and ``POST /events/batch``."""

from __future__ import annotations

from django.urls import path

from . import views

app_name = "ackledger"
urlpatterns = [
    path("events", views.events, name="events"),
    path("events/batch", views.events_batch, name="events-batch"),
]
