//! The chart in a cluster (the simulator): rendered and applied with kubectl, installed,
//! upgraded and rolled back as a Helm release, and installed from an OCI registry.
