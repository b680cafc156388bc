"""The admin: the outbox's events (filter by state; quarantine with a reason, requeue), the
inbox's receipts, the refused messages (replay) and the ledger's deliveries and attempts,
read-only. The actions call the library's ``Outbox.quarantine``, ``Outbox.requeue`` and
``sink.refused.replay``, as ``ackledger quarantine``, ``requeue`` and ``refused replay`` do, so
they write the same outbox log and leave the same refused list."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from ..sink.inbox import Inbox
from ..sink.refused import replay
from ..source.outbox import Outbox
from .models import Attempt, Delivery, InboxReceipt, OutboxEvent, RefusedMessage
from .receive import receive
from .target import database_target


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class StateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("pending", "pending"), ("sent", "sent"), ("quarantined", "quarantined")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        wanted = self.value()
        if wanted == "pending":
            return queryset.filter(sent=0, quarantined=0)
        if wanted == "sent":
            return queryset.filter(sent=1)
        if wanted == "quarantined":
            return queryset.filter(sent=0, quarantined=1)
        return queryset


class ReasonForm(forms.Form):
    reason = forms.CharField(max_length=500, strip=True, label="Reason")


def _outside_request_transactions(view: Any) -> Any:
    """Run ``view`` outside ``ATOMIC_REQUESTS``' transactions: its actions write through the
    library's own transactions, and on SQLite a request's transaction that holds the write
    lock (``transaction_mode`` IMMEDIATE) would make them wait for it until they time out."""
    from django.conf import settings

    view._non_atomic_requests = set(settings.DATABASES)
    return view


@admin.register(OutboxEvent)
class OutboxEventAdmin(ReadOnly):
    list_display = (
        "seq", "event_id", "type", "partitionkey", "state", "quarantine_reason", "attempts",
        "created",
    )  # fmt: skip
    list_filter = (StateFilter, "type")
    search_fields = ("=event_id", "type", "=partitionkey")
    actions = ("quarantine", "requeue")

    @_outside_request_transactions
    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        return super().changelist_view(request, extra_context)

    @admin.action(description="Quarantine the selected pending events (asks for a reason)")
    def quarantine(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
        form = ReasonForm(request.POST if "reason" in request.POST else None)
        if not form.is_valid():
            return TemplateResponse(
                request,
                "ackledger/quarantine.html",
                {
                    **self.admin_site.each_context(request),
                    "title": "Quarantine outbox events",
                    "events": list(queryset),
                    "form": form,
                    "action": "quarantine",
                    "opts": self.model._meta,
                    "selected": request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME),
                },
            )
        reason = form.cleaned_data["reason"]
        self._each(request, queryset, "Quarantined", lambda ob, ev: ob.quarantine(ev, reason))
        return None

    @admin.action(description="Requeue the selected quarantined events")
    def requeue(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._each(request, queryset, "Requeued", lambda ob, ev: ob.requeue(ev))

    def _each(self, request: HttpRequest, queryset: QuerySet[Any], done: str, call: Any) -> None:
        ids = list(queryset.order_by("seq").values_list("event_id", flat=True))
        with Outbox(database_target()) as outbox:
            for event_id in ids:
                try:
                    call(outbox, event_id)
                except (KeyError, ValueError) as exc:
                    self.message_user(request, f"{event_id}: {exc}", messages.ERROR)
                else:
                    self.message_user(request, f"{done} {event_id}", messages.SUCCESS)


@admin.register(InboxReceipt)
class InboxReceiptAdmin(ReadOnly):
    list_display = ("event_id", "source", "name", "type", "receipts", "first_received")
    list_filter = ("name", "type")
    search_fields = ("=event_id", "source", "type")


@admin.register(RefusedMessage)
class RefusedMessageAdmin(ReadOnly):
    list_display = ("refused_no", "event_id", "source", "reason", "refusals", "refused")
    search_fields = ("=event_id", "source", "reason")
    fields = (*list_display[:-1], "content_type", "message_bytes", "text")
    readonly_fields = fields
    actions = ("replay",)

    @_outside_request_transactions
    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        return super().changelist_view(request, extra_context)

    @admin.action(description="Replay the selected refused messages through the inbox")
    def replay(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        numbers = sorted(queryset.values_list("refused_no", flat=True))
        # Through Django's receive: the handlers of settings take Django's connection.
        with Inbox(database_target()) as inbox:
            for number in numbers:
                try:
                    done = replay(inbox, int(number), receive)
                except KeyError:
                    self.message_user(request, f"refused message {number}: gone", messages.ERROR)
                    continue
                level = messages.SUCCESS if done.applied else messages.ERROR
                self.message_user(request, done.text(), level)


@admin.register(Delivery)
class DeliveryAdmin(ReadOnly):
    list_display = ("delivery_no", "case_id", "work_id", "mode", "state", "pod_uid")
    list_filter = ("state", "mode")
    search_fields = ("=case_id", "=work_id")


@admin.register(Attempt)
class AttemptAdmin(ReadOnly):
    list_display = ("attempt_no", "case_id", "work_id", "outcome", "delivery_no", "pod_uid")
    list_filter = ("outcome",)
    search_fields = ("=case_id", "=work_id")
