"""Views of the shop: each request is one transaction (ATOMIC_REQUESTS), in which the order
row and its event are written together."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

import ackledger.django

from .events import order_placed
from .models import Order


def _place(request: HttpRequest) -> Order:
    body = json.loads(request.body)
    order: Order = Order.objects.create(
        number=body["number"], sku=body["sku"], qty=int(body["qty"])
    )
    ackledger.django.publish(order_placed(order))
    return order


@csrf_exempt
def place_order(request: HttpRequest) -> HttpResponse:
    order = _place(request)
    return JsonResponse({"order": order.number}, status=201)


class DeclinedError(Exception):
    pass


@csrf_exempt
def place_order_then_fail(request: HttpRequest) -> HttpResponse:
    _place(request)
    raise DeclinedError("the payment was declined after the order was saved")
