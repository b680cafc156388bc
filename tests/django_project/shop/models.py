from django.db import models


class Order(models.Model):
    number = models.CharField(max_length=64, unique=True)
    sku = models.CharField(max_length=64)
    qty = models.IntegerField()


class Shipment(models.Model):
    order_number = models.CharField(max_length=64, unique=True)
    sku = models.CharField(max_length=64)
    qty = models.IntegerField()
