"""What this machine is and what it can do, for every process: CPU and GPU facts (parsed once),
which precision options a device supports, NVML readings, GPU spec sheets, measured ceilings.
Imports only the shared base; train/, distributed/, the labs and the faces may import it."""
