"""swebench-compatible images of SWE-bench rows, built from source (`proctor images build`).

* `specs`: swebench's installation specs per (repository, version), kept as data;
* `plan`: a row's image as a plan and a Dockerfile (pure);
* `debian`: Debian root filesystems as base images (mmdebstrap; the demo images' too);
* `build`: the shell that clones, writes the build context and has the daemon build it.
"""
