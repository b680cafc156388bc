from django.contrib import admin
from django.urls import path
from shop import views  # type: ignore[import-not-found]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("orders", views.place_order),
    path("orders/failing", views.place_order_then_fail),
]
