from django.contrib import admin
from django.urls import include, path
from shop import views  # type: ignore[import-not-found]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("ackledger.django.urls")),
    path("orders", views.place_order),
    path("orders/failing", views.place_order_then_fail),
]
