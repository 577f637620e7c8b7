"""``cudaopt doctor`` without a GPU: NVRTC and the headers it compiles with must come from one CUDA release."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from cudaopt import doctor
from cudaopt.cli import app


def test_nvrtc_and_headers_of_one_release_pass():
    check = doctor._nvrtc_check("13.5", {"cudart": "13.5", "crt": "13.5"})
    assert check.ok and "headers of the same release (cudart 13.5, crt 13.5)" in check.value


def test_headers_of_another_release_than_nvrtc_fail_and_say_how_to_align_them():
    """What `pip install torch` after cudaopt left: NVRTC and the runtime 13.0, the crt headers 13.5."""
    check = doctor._nvrtc_check("13.0", {"cudart": "13.0", "crt": "13.5"})
    assert not check.ok
    assert "but crt headers 13.5: not one CUDA release" in check.value and "cudart" not in check.value
    assert "'cuda-toolkit[nvrtc,cudart,cccl,crt,curand]==13.0.*'" in check.fix and "'.[torch]'" in check.fix


def test_the_headers_release_is_read_from_the_runtime_header_and_the_crt_wheel(tmp_path, monkeypatch):
    found = doctor.header_releases()  # this installation's own: both families, as major.minor
    assert set(found) == {"cudart", "crt"} and all(re.fullmatch(r"\d+\.\d+", v) for v in found.values())
    root = tmp_path / "include"
    (root / "crt").mkdir(parents=True)
    (root / "cuda_runtime_api.h").write_text("#define CUDART_VERSION  12080\n")
    (root / "crt" / "host_config.h").write_text("")
    monkeypatch.setattr(doctor, "header_roots", lambda: (("cudart", str(root), "system"),))
    assert doctor.header_releases() == {"cudart": "12.8", "crt": "12.8"}  # a toolkit's crt: its runtime's release


def test_doctor_exits_non_zero_on_a_release_mismatch(monkeypatch):
    monkeypatch.setattr(doctor, "nvrtc_version", lambda: "13.0")
    monkeypatch.setattr(doctor, "header_releases", lambda: {"cudart": "13.0", "crt": "13.5"})
    result = CliRunner().invoke(app, ["doctor"], env={"COLUMNS": "400"})
    assert result.exit_code == 1
    line = next(line for line in result.output.splitlines() if "NVRTC" in line)
    assert "crt headers 13.5: not one CUDA release" in line and "==13.0.*" in line


def test_this_installation_compiles_with_one_cuda_release():
    """What `pip install -e .` (and with '.[torch]') installs passes doctor's check: .ci/run runs this in both."""
    from cudaopt.worker.gpu import nvrtc_version

    check = doctor._nvrtc_check(nvrtc_version(), doctor.header_releases())
    assert check.ok, check.value
