"""Helm's own engine for the chart tests, through helm-python-sdk (Helm v4's Go SDK).

Reads one request as JSON on standard input, {"action": ..., ...}, and prints one JSON
answer: {"ok": RESULT} or {"error": KIND, "message": TEXT} for a Helm error.
"""

import json
import sys

import helm_python as helm


def config(request):
    return helm.Config(
        kubeconfig_path=request["kubeconfig"],
        namespace=request.get("namespace", "default"),
    )


def lint(request):
    return helm.lint(request["chart"], request.get("values"), strict=True)


def render(request):
    with helm.Chart.load(request["chart"]) as chart:
        return chart.render(
            request.get("values"),
            name=request.get("name", "switchyard"),
            namespace=request.get("namespace", "switchyard"),
            is_install=True,
        )


def validate(request):
    with helm.Chart.load(request["chart"]) as chart:
        chart.validate_schema(chart.merge_values(request.get("values")))
    return None


def install(request):
    with config(request) as cfg:
        return cfg.install(
            request["chart"], request["name"], request.get("values"),
            namespace=request.get("namespace"), timeout=60,
            create_namespace=request.get("create_namespace", False),
            chart_version=request.get("version"),
            plain_http=request.get("plain_http", False),
            dry_run=request.get("dry_run"),
        )


def upgrade(request):
    with config(request) as cfg:
        return cfg.upgrade(
            request["chart"], request["name"], request.get("values"),
            namespace=request.get("namespace"), timeout=60,
        )


def rollback(request):
    with config(request) as cfg:
        cfg.rollback(request["name"], version=request.get("version"), timeout=60)
        return cfg.history(request["name"])


def history(request):
    with config(request) as cfg:
        return cfg.history(request["name"])


def uninstall(request):
    with config(request) as cfg:
        return cfg.uninstall(request["name"], timeout=60)


def package(request):
    return helm.package(request["chart"], destination=request["destination"])


def push(request):
    with helm.RegistryClient(plain_http=True) as client:
        return client.push(request["archive"], request["remote"])


ACTIONS = {
    f.__name__: f
    for f in [lint, render, validate, install, upgrade, rollback, history, uninstall, package, push]
}


def main():
    request = json.load(sys.stdin)
    try:
        result = ACTIONS[request["action"]](request)
    except helm.HelmError as error:
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        return
    print(json.dumps({"ok": result}, default=str))


if __name__ == "__main__":
    main()
