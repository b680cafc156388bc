"""The shop's own tests, run by ``manage.py test``: ackledger's migration makes its tables in
Django's test database too, and a TestCase's transaction is the atomic block publish needs."""

from __future__ import annotations

import json

from django.test import TestCase

from ackledger.django.models import OutboxEvent

from .models import Order


class PlaceOrderTests(TestCase):
    def test_the_order_and_its_event(self) -> None:
        body = json.dumps({"number": "77", "sku": "tea", "qty": 1})
        answer = self.client.post("/orders", body, content_type="application/json")
        self.assertEqual(answer.status_code, 201)
        self.assertEqual(list(Order.objects.values_list("number", flat=True)), ["77"])
        self.assertEqual(
            list(OutboxEvent.objects.filter(sent=0).values_list("event_id", flat=True)),
            ["order-77"],
        )
