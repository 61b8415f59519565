import json

import pytest

from scalelab import hardware
from scalelab.cli import main
from scalelab.errors import UsageError


def test_catalog_has_the_required_entries_with_sources():
    cat = hardware.catalog()
    for name in ("V100-SXM2-16GB", "V100-SXM2-32GB", "A100-SXM-40GB", "A100-SXM-80GB",
                 "A100-PCIE-40GB", "H100-SXM", "H100-PCIE", "H200", "L4", "T4"):
        d = cat.devices[name]
        assert d.source and d.fp32_tflops > 0 and d.memory_bytes > 0
        assert d.memory_bandwidth_Bps > 0
    for name in ("nvlink2", "nvlink3", "nvlink4", "pcie3", "pcie4", "pcie5"):
        assert cat.links[name].bandwidth_Bps > 0 and cat.links[name].source
    for name in ("1GbE", "10GbE", "25GbE", "40GbE", "100GbE", "200GbE", "400GbE",
                 "IB-FDR", "IB-EDR", "IB-HDR", "IB-NDR"):
        n = cat.networks[name]
        assert 0 < n.payload_gbps <= n.gbps and n.source
    assert hardware.network("FDR").gbps == 56.0


def test_dense_not_sparse_figures():
    a100 = hardware.device("A100")
    assert a100.peak_flops("bf16") == pytest.approx(312e12)
    assert a100.peak_flops("tf32") == pytest.approx(156e12)
    assert hardware.device("H100-SXM").peak_flops("fp16") == pytest.approx(989.5e12)
    assert hardware.device("V100-SXM2-16GB").peak_flops("bf16") is None  # no BF16 path


def test_cpu_is_unknown_never_guessed():
    cpu = hardware.device("cpu")
    for p in hardware.PRECISIONS:
        assert cpu.peak_flops(p) is None
    assert hardware.match_device("Intel(R) Xeon(R) Platinum") is None
    assert hardware.match_device("NVIDIA H100 80GB HBM3").name == "H100-SXM"
    assert hardware.match_device("NVIDIA A100-SXM4-80GB").name == "A100-SXM-80GB"


def test_unknown_names_list_known_ones():
    with pytest.raises(UsageError, match="known: .*A100-SXM-80GB"):
        hardware.device("A99")
    with pytest.raises(UsageError, match="known: .*10GbE"):
        hardware.network("3GbE")
    with pytest.raises(UsageError, match="nvlink3"):
        hardware.link("nvlink9")


def test_cli_list_and_show(capsys):
    assert main(["hardware", "list"]) == 0
    out = capsys.readouterr().out
    assert "H200" in out and "IB-NDR" in out and "pcie5" in out
    assert main(["hardware", "show", "10GbE", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == "network" and d["gbps"] == 10.0 and d["source"]
    assert main(["hardware", "show", "cpu"]) == 0
    assert "unknown" in capsys.readouterr().out


def test_cli_unknown_name_exits_2(capsys):
    assert main(["hardware", "show", "A99"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "known:" in err
