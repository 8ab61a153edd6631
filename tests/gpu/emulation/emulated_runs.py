"""What the emulated device's Python tests share: the environment that puts the emulated
libraries first, the mpirun launch of 2 processes each on its own emulated GPU, a program run
that ends the test with its output when it fails, train_gpt's flags with some values replaced,
and the CPU-against-device comparison of losses."""
import os
import subprocess
import sys


def emulated_env(emulated_libs, **extra):
    """os.environ with EMULATED_LIBS first on LD_LIBRARY_PATH (meson may prepend the build's
    folders, which hold the real libraries' links) and the given variables set."""
    env = dict(os.environ, **extra)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        [emulated_libs] + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else []))
    return env


def mpi_launch(env, mpirun):
    """(environment, launcher) for 2 processes under mpirun as root, each on its own emulated
    GPU, a peer missing for 60 s failing the collective rather than hanging the test."""
    mpi_env = dict(env, FSDP_EMU_CUDA_DEVICES="2", OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
                   FSDP_EMU_NCCL_TIMEOUT="60")
    launcher = [mpirun, "-np", "2", "--bind-to", "none", "-x", "LD_LIBRARY_PATH",
                "-x", "FSDP_EMU_CUDA_DEVICES", "-x", "FSDP_EMU_NCCL_TIMEOUT"]
    return mpi_env, launcher


def run_or_exit(cmd, env, timeout, what):
    """The finished run of cmd; a non-zero exit ends the test with `what` and the output."""
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if run.returncode != 0:
        sys.exit(f"{what} failed ({run.returncode}):\n{run.stdout}{run.stderr}")
    return run


def with_values(flags, overrides):
    """flags (a list of --flag value pairs) with some flags' values replaced."""
    out = list(flags)
    for flag, value in overrides.items():
        out[out.index(flag) + 1] = value
    return out


def agree(name, cpu, cuda, tol):
    """Prints the comparison; whether the worst relative difference is within tol."""
    worst = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(cpu, cuda))
    ok = worst <= tol
    print(f"{'ok ' if ok else 'BAD'} {name}: cpu {cpu} cuda {cuda} (worst {worst:.2e}, "
          f"tolerance {tol:g})")
    return ok
