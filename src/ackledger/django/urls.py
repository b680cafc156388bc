"""``path("", include("ackledger.django.urls"))``: ``POST /events``."""

from __future__ import annotations

from django.urls import path

from . import views

app_name = "ackledger"
urlpatterns = [path("events", views.events, name="events")]
