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


def test_devices_people_train_on_have_dense_figures_and_sources():
    for name in ("K80", "P100-PCIE-16GB", "P100-SXM2-16GB", "V100-PCIE-16GB", "A10", "L40S",
                 "RTX-4090", "H100-NVL", "B200", "GB200", "MI250X", "MI300X"):
        d = hardware.device(name)
        assert d.source and d.fp32_tflops > 0 and d.memory_bandwidth_Bps > 0
        assert d.memory_bytes > 0 and hardware.link(d.intra_node).bandwidth_Bps > 0
    # dense, not sparse: B200's 4.5 PFLOPS sparse BF16 is 2.25 dense
    assert hardware.device("B200").peak_flops("bf16") == pytest.approx(2250e12)
    assert hardware.device("MI300X").peak_flops("fp16") == pytest.approx(1307.4e12)
    assert hardware.device("K80").peak_flops("fp16") is None
    a10g = hardware.device("A10G")  # no vendor datasheet: peaks unknown, never guessed
    assert a10g.peak_flops("fp32") is None and a10g.memory_bandwidth_Bps is None
    assert hardware.device("P100-SXM2-16GB").intra_node == "nvlink1"


def test_links_and_networks_added():
    assert hardware.link("nvlink1").bandwidth_Bps == pytest.approx(80e9)
    assert hardware.link("nvlink5").bandwidth_Bps == pytest.approx(900e9)
    assert hardware.network("800GbE").gbps == 800.0
    xdr = hardware.network("XDR")
    assert xdr.gbps == 800.0 and xdr.payload_gbps == pytest.approx(800 * 0.9937, rel=1e-3)
    roce = hardware.network("RoCE")
    assert roce.gbps == 100.0 and roce.payload_gbps == pytest.approx(100 * 4096 / 4178, rel=1e-3)


def test_platform_nic_and_cores_where_a_source_says():
    h100, a100 = hardware.device("H100-SXM"), hardware.device("A100")
    assert (h100.gpus_per_nic, h100.cpu_cores_per_node) == (1, 112)
    assert (a100.gpus_per_nic, a100.cpu_cores_per_node) == (1, 128)
    assert hardware.device("V100").gpus_per_nic == 2
    assert "DGX" in h100.platform_source
    assert hardware.device("L4").gpus_per_nic is None  # no platform source: unknown


def test_reported_names_match_whole_words():
    assert hardware.match_device("NVIDIA A10").name == "A10"
    other = hardware.match_device("NVIDIA A100 80GB HBM2e")
    assert other is None or other.name != "A10"
    assert hardware.match_device("NVIDIA GeForce RTX 4090").name == "RTX-4090"
    assert hardware.match_device("Tesla K80").name == "K80"


def test_cli_unknown_name_lists_close_matches(capsys):
    assert main(["hardware", "show", "B20"]) == 2
    err = capsys.readouterr().err
    assert "did you mean" in err and "B200" in err


def test_cli_fit_shows_fractions_and_bands(capsys):
    assert main(["hardware", "fit", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {r["units"] for r in d["pooled"]} == {"cuda-core", "tf32", "half"}
    assert all(0 < r["e_c"] <= 1 and 0 < r["e_m"] <= 1 and r["band"] >= 0
               for r in d["devices"])
    assert d["launch_s"] > 0 and all(p["source"] for p in d["points"])
    nchw = [r for r in d["factors"] if r["op_class"] == "conv_nchw"]
    assert [r["units"] for r in nchw] == ["half"] and min(nchw[0]["k_c"], nchw[0]["k_m"]) < 1
    assert {p["memory_format"] for p in d["points"]} == {"nchw", "nhwc"}
    assert d["fit_source"].startswith("as shipped: fit.json")  # the package's fit is current
    # the device's cost per kernel: fitted where a class holds several networks (the H200 in
    # fp32), 0 where one network was measured
    by = {(r["device"], r["units"]): r for r in d["devices"]}
    assert by[("H200", "tf32")]["kernel_s"] > 0 and by[("K80", "cuda-core")]["kernel_s"] == 0
