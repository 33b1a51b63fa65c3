"""aitune-ray doctor: this machine's row on CPU, and one row per node of a Ray cluster with fake GPUs."""

from __future__ import annotations

import json
import platform

import pytest
import torch

from aitune_ray.executors import doctor
from aitune_ray.command.cli import main


def test_this_machine_on_cpu(capsys):
    row = doctor.machine_report()
    assert row["node"] == platform.node() and row["torch"] == torch.__version__
    assert row["python"] == platform.python_version()
    assert row["libraries"]["onnxruntime"]["ok"] and "CPUExecutionProvider" in row["libraries"]["onnxruntime"]["providers"]
    assert row["libraries"]["ray"]["ok"] and not row["libraries"]["tensorrt"]["ok"]
    if torch.cuda.is_available():
        pytest.skip("the rest is about a machine without a GPU")
    assert row["target"] == "cpu" and row["gpus"] == []
    by_name = {b["name"]: b for b in row["backends"]}
    assert by_name["TorchEagerBackend"]["devices"] == ["cpu"] and by_name["ONNXRuntimeBackend"]["devices"] == ["cpu"]
    assert {"TorchEagerBackend", "ONNXRuntimeBackend", "TorchInductorJitBackend"} <= set(row["runnable"])
    providers = {p["name"]: p for p in row["providers"]}
    assert providers["SageAttention"]["devices"] == [] and "a CUDA GPU" in providers["SageAttention"]["missing"]
    assert main(["doctor"]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].split()[:4] == ["node", "python", "torch", "CUDA"]
    assert f"{platform.node()}: tunes for cpu; can run: " in printed
    assert "SageAttention: not on cpu" in printed


def test_missing_libraries_name_the_extra_to_install(monkeypatch):
    real = doctor.library_status
    monkeypatch.setattr(doctor, "library_status",
                        lambda name: {"ok": False, "version": None, "error": "not installed", "extra": "onnx"}
                        if name == "onnxruntime" else real(name))
    row = doctor.machine_report()
    ort = next(b for b in row["backends"] if b["name"] == "ONNXRuntimeBackend")
    assert ort["devices"] == [] and ort["missing"] == ["onnxruntime"]
    assert ort["install"] == "pip install 'aitune-ray[onnx]'"
    assert "ONNXRuntimeBackend" not in row["runnable"]
    assert "ONNXRuntimeBackend: not on cpu (needs onnxruntime); install: pip install 'aitune-ray[onnx]'" in \
        doctor.render([row])


def test_exit_code_says_whether_every_node_can_run_something():
    assert doctor.exit_code([{"can_run": True}, {"can_run": True}]) == 0
    assert doctor.exit_code([{"can_run": True}, {"can_run": False}]) == 1
    assert doctor.exit_code([]) == 1


@pytest.mark.slow
def test_one_row_per_node_of_a_cluster_with_fake_gpus(capsys):
    """Two Ray nodes advertising one GPU each on a machine without CUDA: a row each, tuning on their CPU."""
    import ray
    from ray.cluster_utils import Cluster

    if torch.cuda.is_available():
        pytest.skip("fake GPUs only on a machine without CUDA")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1, num_gpus=1)
        cluster.wait_for_nodes()
        code = main(["doctor", "--address", cluster.address, "--json"])
        assert not ray.is_initialized()                 # the command shut down what it connected
    finally:
        cluster.shutdown()
    rows = json.loads(capsys.readouterr().out)
    assert code == 0
    assert len(rows) == 2 and len({r["node_id"] for r in rows}) == 2
    for row in rows:
        assert row["ray_gpus"] == 1 and row["gpus"] == [] and row["target"] == "cpu" and row["can_run"]
        assert any("Ray advertises 1 GPU(s) here but torch sees no CUDA device" in n for n in row["notes"])


def test_doctor_and_the_sdpa_provider_agree_on_flash_on_the_cpu():
    """PyTorch's flash SDPA has a CPU kernel, which the attention example's plan uses there: doctor says so."""
    from aitune_ray.kernel_forge.kernel_provider.torch_sdpa import backend_op_call, sdpa_backend

    providers = {p["name"]: p for p in doctor.machine_report()["providers"]}
    assert "cpu" in providers["TorchSDPA (flash)"]["devices"] and not providers["TorchSDPA (flash)"]["missing"]
    q, k, v = (torch.randn(1, 2, 8, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
    out = backend_op_call(sdpa_backend("flash"), (q, k, v), {})
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v))
