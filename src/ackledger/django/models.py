"""ackledger's tables as Django models, for the admin to read (``managed = False``: the
tables are made and changed by ackledger's migrator alone, never by Django's)."""

from __future__ import annotations

import datetime

from django.db import models


def _when(seconds: float | None) -> datetime.datetime | None:
    if seconds is None:
        return None
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)


class OutboxEvent(models.Model):
    seq = models.BigIntegerField(primary_key=True)
    event_id = models.TextField("id", db_column="id")
    source = models.TextField()
    type = models.TextField()
    subject = models.TextField(null=True)
    partitionkey = models.TextField("partition key", null=True)
    data = models.TextField(null=True)
    event = models.TextField()
    sent = models.IntegerField()
    quarantined = models.IntegerField()
    quarantine_reason = models.TextField(null=True)
    quarantined_at = models.FloatField(null=True)
    created_at = models.FloatField()
    sent_at = models.FloatField(null=True)
    attempts = models.IntegerField()
    last_error = models.TextField(null=True)
    last_attempt_at = models.FloatField(null=True)

    class Meta:
        managed = False
        db_table = "ackledger_outbox"
        ordering = ["-seq"]
        verbose_name = "outbox event"

    def __str__(self) -> str:
        return f"{self.event_id} ({self.type})"

    @property
    def state(self) -> str:
        if self.sent:
            return "sent"
        return "quarantined" if self.quarantined else "pending"

    @property
    def created(self) -> datetime.datetime | None:
        return _when(self.created_at)


class InboxReceipt(models.Model):
    # The table's key is (id, source, name); Django needs one column to name a row by, and
    # the admin only reads these rows.
    event_id = models.TextField("id", db_column="id", primary_key=True)
    source = models.TextField()
    #: The inbox whose receipt it is (``Inbox(name=...)``), of those sharing the database.
    name = models.TextField("inbox")
    type = models.TextField()
    fingerprint = models.TextField()
    first_received_at = models.FloatField()
    last_received_at = models.FloatField()
    receipts = models.IntegerField()
    arrival = models.BigIntegerField(null=True)

    class Meta:
        managed = False
        db_table = "ackledger_inbox"
        ordering = ["-first_received_at"]
        verbose_name = "inbox receipt"

    def __str__(self) -> str:
        return f"{self.event_id} from {self.source}"

    @property
    def first_received(self) -> datetime.datetime | None:
        return _when(self.first_received_at)


class Delivery(models.Model):
    delivery_no = models.BigIntegerField(primary_key=True)
    case_id = models.TextField()
    work_id = models.TextField()
    mode = models.TextField()
    state = models.TextField()
    pod_uid = models.TextField()
    result = models.TextField(null=True)
    created_at = models.FloatField()
    completed_at = models.FloatField(null=True)

    class Meta:
        managed = False
        db_table = "ackledger_deliveries"
        ordering = ["-delivery_no"]
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"delivery {self.delivery_no} ({self.case_id}/{self.work_id})"


class Attempt(models.Model):
    attempt_no = models.BigIntegerField(primary_key=True)
    case_id = models.TextField()
    work_id = models.TextField()
    pod_uid = models.TextField()
    mode = models.TextField()
    delivery_no = models.BigIntegerField(null=True)
    outcome = models.TextField()
    at = models.FloatField()
    claim = models.TextField(null=True)
    exit_status = models.IntegerField(null=True)

    class Meta:
        managed = False
        db_table = "ackledger_attempts"
        ordering = ["-attempt_no"]

    def __str__(self) -> str:
        return f"attempt {self.attempt_no} ({self.case_id}/{self.work_id}: {self.outcome})"


class RefusedMessage(models.Model):
    refused_no = models.BigIntegerField("no", primary_key=True)
    source = models.TextField(null=True)
    event_id = models.TextField("id", db_column="id", null=True)
    reason = models.TextField()
    message = models.BinaryField()
    message_bytes = models.IntegerField()
    content_type = models.TextField(null=True)
    refused_at = models.FloatField()
    last_refused_at = models.FloatField()
    refusals = models.IntegerField()

    class Meta:
        managed = False
        db_table = "ackledger_refused"
        ordering = ["-refused_no"]
        verbose_name = "refused message"

    def __str__(self) -> str:
        return f"refused message {self.refused_no} ({self.event_id or 'unreadable'})"

    @property
    def refused(self) -> datetime.datetime | None:
        return _when(self.refused_at)

    @property
    def text(self) -> str:
        """The kept message as text (bytes that are not UTF-8 shown replaced)."""
        return bytes(self.message).decode("utf-8", errors="replace")
