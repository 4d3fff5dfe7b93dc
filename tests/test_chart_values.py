"""The values-key checker must be able to fail, or the chart tests prove nothing."""

from tests.support.chart_values import load_chart_values, unknown_value_keys


def test_detects_the_removed_hami_image_tag_key(vendor_dir):
    chart = load_chart_values(vendor_dir / "hami" / "values.yaml")
    values = {"scheduler": {"kubeScheduler": {"imageTag": "v1.35.0"}}}
    assert unknown_value_keys(values, chart) == ["scheduler.kubeScheduler.imageTag"]


def test_accepts_real_keys_and_free_form_maps(vendor_dir):
    chart = load_chart_values(vendor_dir / "hami" / "values.yaml")
    values = {
        "scheduler": {"kubeScheduler": {"image": {"registry": "registry.k8s.io", "tag": "v1.35.0"}}},
        "devicePlugin": {"podAnnotations": {"anything": "goes"}},
    }
    assert unknown_value_keys(values, chart) == []


def test_detects_a_typo_at_top_level(vendor_dir):
    chart = load_chart_values(vendor_dir / "kamaji" / "values.yaml")
    assert unknown_value_keys({"telemetry": {"disable": True}}, chart) == ["telemetry.disable"]
    assert unknown_value_keys({"telemetry": {"disabled": True}, "resources": None}, chart) == []
