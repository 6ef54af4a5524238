"""One view that starts a workflow with the project's shared client."""

from django.http import HttpRequest, JsonResponse
from django.urls import path

from harvest.integrations.django import get_client


def start_greet(request: HttpRequest, name: str) -> JsonResponse:
    handle = get_client().start_workflow("greet", name, workflow_id=f"greet-{name}")
    return JsonResponse({"execution_id": handle.execution_id}, status=202)


urlpatterns = [path("greet/<str:name>", start_greet)]
