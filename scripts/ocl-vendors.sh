# ocl-vendors.sh - sourced by the GPU scripts: an OpenCL vendors folder that names NVIDIA's driver.
# The device image ships libnvidia-opencl.so.1 without an .icd file and names it in
# OCL_ICD_FILENAMES, which Debian's ocl-icd 2.3.1 ignores there (only PoCL listed),
# while an .icd file in OCL_ICD_VENDORS loads it (backends/opencl/tools/icd_probe.c found the
# driver answering "NVIDIA CUDA"). So: every .icd of /etc/OpenCL/vendors plus nvidia.icd.
ocl_vendors_dir=${TMPDIR:-/tmp}/distil-ocl-vendors
mkdir -p "$ocl_vendors_dir"
cp /etc/OpenCL/vendors/*.icd "$ocl_vendors_dir"/ 2>/dev/null
if ! grep -qs nvidia "$ocl_vendors_dir"/*.icd; then
    for lib in libnvidia-opencl.so.1 $(find /usr/lib /usr/lib64 /usr/local/nvidia -name \
        'libnvidia-opencl.so*' 2>/dev/null | head -n 1); do
        [ -n "$lib" ] && echo "$lib" > "$ocl_vendors_dir/nvidia.icd" && break
    done
fi
export OCL_ICD_VENDORS="$ocl_vendors_dir"
unset OCL_ICD_FILENAMES
