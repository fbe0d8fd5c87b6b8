//! The CUDA driver API, the few calls rocelink needs, behind small types whose `unsafe`
//! blocks state their contracts.

use std::ffi::{c_void, CString};
use std::ptr::NonNull;

use cudarc::driver::sys;

use crate::mem::{SharedMem, PAGE};

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no CUDA driver on this machine ({0}); the GPU backend needs libcuda.so.1 from an NVIDIA driver")]
    NoDriver(String),
    #[error("no CUDA device {ordinal} (this machine has {count})")]
    NoDevice { ordinal: usize, count: usize },
    #[error("CUDA call {call} failed: {err}")]
    Cuda { call: &'static str, err: String },
    #[error("NVRTC: {0}")]
    Nvrtc(String),
    #[error("kernel compilation failed for {arch}:\n{log}")]
    Compile { arch: String, log: String },
    #[error("{0}")]
    Other(String),
}

fn check(call: &'static str, r: sys::CUresult) -> Result<(), GpuError> {
    r.result().map_err(|e| GpuError::Cuda { call, err: format!("{e:?}") })
}

/// Is a CUDA driver library loadable? Checked before any other call: cudarc's dynamically
/// loaded functions panic when the library is missing.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library.
    unsafe { sys::is_culib_present() }
}

/// What a device is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GpuInfo {
    pub ordinal: usize,
    pub name: String,
    /// Compute capability (major, minor).
    pub cc: (i32, i32),
    pub multiprocessors: i32,
    /// cuDriverGetVersion, e.g. 13000.
    pub driver_version: i32,
    /// Shared memory one block may have with an opt-in (static and dynamic together; 227 KiB
    /// on Hopper).
    pub max_shared_per_block_optin: i32,
}

impl GpuInfo {
    /// "sm_90" for NVRTC.
    pub fn arch(&self) -> String {
        format!("sm_{}{}", self.cc.0, self.cc.1)
    }

    /// One line for report headers.
    pub fn describe(&self) -> String {
        format!(
            "GPU {} {} (sm_{}{}, {} SMs), CUDA driver {}.{}",
            self.ordinal,
            self.name,
            self.cc.0,
            self.cc.1,
            self.multiprocessors,
            self.driver_version / 1000,
            (self.driver_version % 1000) / 10
        )
    }
}

/// Why the GPU cannot be used, or the number of devices.
pub fn device_count() -> Result<usize, GpuError> {
    if !driver_present() {
        return Err(GpuError::NoDriver("libcuda.so not found".into()));
    }
    // SAFETY: the library is present; cuInit has no preconditions.
    check("cuInit", unsafe { sys::cuInit(0) }).map_err(|e| GpuError::NoDriver(e.to_string()))?;
    let mut n = 0;
    // SAFETY: cuInit succeeded; writes one int.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
    Ok(n.max(0) as usize)
}

/// The name of device `ordinal` as the driver gives it (`NVIDIA H200`), without making a
/// context.
pub fn device_name(ordinal: usize) -> Result<String, GpuError> {
    let count = device_count()?;
    if ordinal >= count {
        return Err(GpuError::NoDevice { ordinal, count });
    }
    let mut dev = 0;
    let mut name = [0i8; 256];
    // SAFETY: cuInit succeeded in device_count; the out-pointers are valid locals and the
    // name buffer holds the 255 bytes asked for and its NUL.
    unsafe {
        check("cuDeviceGet", sys::cuDeviceGet(&mut dev, ordinal as i32))?;
        check("cuDeviceGetName", sys::cuDeviceGetName(name.as_mut_ptr(), 255, dev))?;
        Ok(std::ffi::CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned())
    }
}

/// One device with its primary context made current on the calling thread.
pub struct Gpu {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    pub info: GpuInfo,
}

// SAFETY: a CUcontext may be used from any thread after cuCtxSetCurrent; `Gpu` makes it
// current in every method that needs it.
unsafe impl Send for Gpu {}

impl Gpu {
    /// Opens device `ordinal` (retains its primary context, makes it current here).
    pub fn open(ordinal: usize) -> Result<Gpu, GpuError> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(GpuError::NoDevice { ordinal, count });
        }
        let mut dev = 0;
        // SAFETY: cuInit succeeded in device_count; out-pointers are valid locals.
        unsafe {
            check("cuDeviceGet", sys::cuDeviceGet(&mut dev, ordinal as i32))?;
            let mut ctx = std::ptr::null_mut();
            check("cuDevicePrimaryCtxRetain", sys::cuDevicePrimaryCtxRetain(&mut ctx, dev))?;
            check("cuCtxSetCurrent", sys::cuCtxSetCurrent(ctx))?;
            let attr = |a| {
                let mut v = 0;
                sys::cuDeviceGetAttribute(&mut v, a, dev);
                v
            };
            let mut name = [0i8; 256];
            check("cuDeviceGetName", sys::cuDeviceGetName(name.as_mut_ptr(), 255, dev))?;
            let name = std::ffi::CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned();
            let mut driver_version = 0;
            sys::cuDriverGetVersion(&mut driver_version);
            let info = GpuInfo {
                ordinal,
                name,
                cc: (
                    attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                    attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
                ),
                multiprocessors: attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
                driver_version,
                max_shared_per_block_optin: attr(
                    sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                ),
            };
            Ok(Gpu { dev, ctx, info })
        }
    }

    /// Makes the context current on the calling thread.
    pub fn make_current(&self) -> Result<(), GpuError> {
        // SAFETY: ctx is a retained primary context.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.ctx) })
    }

    /// Registers `len` bytes of host memory at `ptr` for device access (pinned, mapped) and
    /// returns the device address of `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be a live, page-aligned allocation that outlives the registration
    /// (until [`Gpu::unregister`]).
    pub unsafe fn register(&self, ptr: NonNull<u8>, len: usize) -> Result<u64, GpuError> {
        self.make_current()?;
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
        check("cuMemHostRegister", sys::cuMemHostRegister_v2(ptr.as_ptr() as *mut c_void, len, flags))?;
        let mut dptr = 0;
        check(
            "cuMemHostGetDevicePointer",
            sys::cuMemHostGetDevicePointer_v2(&mut dptr, ptr.as_ptr() as *mut c_void, 0),
        )?;
        Ok(dptr)
    }

    /// Allocates `len` bytes (at least a page, rounded up to pages) of pinned host memory
    /// mapped into the device, the other way to get it than [`Gpu::register`]
    /// (cuMemHostAlloc, PORTABLE | DEVICEMAP), zeroed, as a [`SharedMem`] whose device base is
    /// the mapped address. Dropping it frees it (cuMemFreeHost, with this context made
    /// current on the dropping thread), so it must drop while the context lives (before the
    /// last [`Gpu`] of the device is dropped) and after the last kernel that touches it ended;
    /// otherwise leak it (`std::mem::forget`), as [`Gpu::abandon`] does the context.
    pub fn host_alloc(&self, len: usize) -> Result<SharedMem, GpuError> {
        self.make_current()?;
        let len = len.max(PAGE).div_ceil(PAGE) * PAGE;
        let mut p: *mut c_void = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: out-pointer valid; the context is current.
        check("cuMemHostAlloc", unsafe { sys::cuMemHostAlloc(&mut p, len, flags) })?;
        let Some(ptr) = NonNull::new(p as *mut u8) else {
            return Err(GpuError::Other("cuMemHostAlloc returned a null pointer".into()));
        };
        let ctx = self.ctx as usize;
        let free = move |p: *mut u8| {
            // SAFETY: `p` came from cuMemHostAlloc in context `ctx`, which the owner keeps alive
            // until this runs (the contract above); nothing uses it any more.
            unsafe {
                sys::cuCtxSetCurrent(ctx as sys::CUcontext);
                sys::cuMemFreeHost(p as *mut c_void);
            }
        };
        let mut dptr = 0;
        // SAFETY: `ptr` is a mapped allocation of this context (DEVICEMAP).
        if let Err(e) =
            check("cuMemHostGetDevicePointer", unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dptr, p, 0) })
        {
            free(ptr.as_ptr());
            return Err(e);
        }
        // SAFETY: `len` writable bytes at `ptr` (cuMemHostAlloc's page-aligned allocation).
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, len) };
        // SAFETY: zeroed, page-aligned, `len` bytes valid until `free`; dptr maps byte 0.
        Ok(unsafe { SharedMem::from_foreign(ptr, len, dptr, Box::new(free)) })
    }

    /// # Safety
    /// `ptr` was registered with [`Gpu::register`] and no kernel uses it any more.
    pub unsafe fn unregister(&self, ptr: NonNull<u8>) -> Result<(), GpuError> {
        self.make_current()?;
        check("cuMemHostUnregister", sys::cuMemHostUnregister(ptr.as_ptr() as *mut c_void))
    }

    /// Loads a cubin and returns the named functions.
    pub fn load(&self, cubin: &[u8], names: &[&str]) -> Result<Module, GpuError> {
        self.make_current()?;
        let mut module = std::ptr::null_mut();
        // cuModuleLoadData reads a cubin from memory; keep it NUL-terminated for safety.
        let mut image = cubin.to_vec();
        image.push(0);
        // SAFETY: image is a valid cubin (from NVRTC) that lives through the call.
        check("cuModuleLoadData", unsafe { sys::cuModuleLoadData(&mut module, image.as_ptr() as *const c_void) })?;
        let mut functions = Vec::new();
        for n in names {
            let c = CString::new(*n).expect("kernel names have no NUL");
            let mut f = std::ptr::null_mut();
            // SAFETY: module was loaded above.
            check("cuModuleGetFunction", unsafe { sys::cuModuleGetFunction(&mut f, module, c.as_ptr()) })?;
            functions.push(f);
        }
        Ok(Module { module, functions })
    }

    /// Allocates `len` bytes of device memory (at least 1; cuMemAlloc aligns to 256 bytes).
    /// Done before a persistent kernel starts (docs/perf.md, "GPU habits": everything is
    /// allocated before the launch); freed with [`Gpu::free`] once no kernel can touch it.
    pub fn alloc(&self, len: usize) -> Result<DeviceBuffer, GpuError> {
        self.make_current()?;
        let mut ptr = 0;
        // SAFETY: out-pointer valid; the context is current.
        check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, len.max(1)) })?;
        Ok(DeviceBuffer { ptr, len })
    }

    /// Copies `src` to `dst` at byte `offset` (synchronous; not while a persistent kernel
    /// runs: it uses the legacy default stream).
    pub fn upload(&self, dst: &DeviceBuffer, offset: usize, src: &[u8]) -> Result<(), GpuError> {
        if offset.checked_add(src.len()).is_none_or(|end| end > dst.len) {
            return Err(GpuError::Other(format!(
                "upload of {} bytes at {offset} past a {}-byte buffer",
                src.len(),
                dst.len
            )));
        }
        if src.is_empty() {
            return Ok(());
        }
        self.make_current()?;
        // SAFETY: the range lies inside the allocation (checked above); src is a live slice.
        check("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD_v2(dst.ptr + offset as u64, src.as_ptr() as *const c_void, src.len())
        })
    }

    /// Copies `dst.len()` bytes at byte `offset` of `src` back (synchronous; as
    /// [`Gpu::upload`], only when no persistent kernel runs).
    pub fn download(&self, src: &DeviceBuffer, offset: usize, dst: &mut [u8]) -> Result<(), GpuError> {
        if offset.checked_add(dst.len()).is_none_or(|end| end > src.len) {
            return Err(GpuError::Other(format!(
                "download of {} bytes at {offset} past a {}-byte buffer",
                dst.len(),
                src.len
            )));
        }
        if dst.is_empty() {
            return Ok(());
        }
        self.make_current()?;
        // SAFETY: the range lies inside the allocation (checked above); dst is a live slice.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(dst.as_mut_ptr() as *mut c_void, src.ptr + offset as u64, dst.len())
        })
    }

    /// Frees device memory.
    ///
    /// # Safety
    /// No kernel may use `buf` any more (the stream that ran the kernel is idle).
    pub unsafe fn free(&self, buf: DeviceBuffer) -> Result<(), GpuError> {
        self.make_current()?;
        check("cuMemFree", sys::cuMemFree_v2(buf.ptr))
    }

    /// A non-blocking stream (never the default stream).
    pub fn stream(&self) -> Result<Stream, GpuError> {
        self.make_current()?;
        let mut s = std::ptr::null_mut();
        // SAFETY: out-pointer valid; flag 1 = CU_STREAM_NON_BLOCKING.
        check("cuStreamCreate", unsafe { sys::cuStreamCreate(&mut s, 1) })?;
        Ok(Stream(s))
    }
}

impl Gpu {
    /// Gives the context up without releasing it: for a host side whose kernel did not stop.
    /// Releasing the primary context (what dropping does) may wait for that kernel, which
    /// would turn a clear error into a hang; left retained, the kernel runs on until the
    /// process exits, when the driver reclaims everything.
    pub fn abandon(self) {
        std::mem::forget(self);
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: releases the retain of `open`.
        unsafe {
            sys::cuDevicePrimaryCtxRelease_v2(self.dev);
        }
    }
}

/// Device memory from [`Gpu::alloc`]. Deliberately not freed on drop: when a persistent
/// kernel does not stop, its host side gives up and must leave the memory the kernel may
/// still touch (the driver reclaims it at process exit); [`Gpu::free`] frees it otherwise.
#[derive(Debug)]
pub struct DeviceBuffer {
    ptr: u64,
    len: usize,
}

impl DeviceBuffer {
    /// The device address.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A loaded module and the functions asked for.
pub struct Module {
    module: sys::CUmodule,
    functions: Vec<sys::CUfunction>,
}

// SAFETY: module handles are context objects usable from any thread with the context current.
unsafe impl Send for Module {}

impl Module {
    pub fn function(&self, i: usize) -> sys::CUfunction {
        self.functions[i]
    }

    /// The dynamic shared memory function `i` can be launched with on `gpu`: the opt-in
    /// per-block maximum less its static shared memory.
    pub fn dynamic_shared_room(&self, gpu: &Gpu, i: usize) -> usize {
        let mut fixed = 0;
        // SAFETY: a loaded function; the out-pointer is a valid local.
        let r = unsafe {
            sys::cuFuncGetAttribute(
                &mut fixed,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                self.functions[i],
            )
        };
        if r != sys::CUresult::CUDA_SUCCESS {
            return 0;
        }
        (gpu.info.max_shared_per_block_optin.max(0) as usize).saturating_sub(fixed.max(0) as usize)
    }

    /// Lets function `i` be launched with `bytes` of dynamic shared memory (above the default
    /// 48 KiB a launch may ask for without it).
    pub fn allow_dynamic_shared(&self, i: usize, bytes: usize) -> Result<(), GpuError> {
        let bytes = i32::try_from(bytes).unwrap_or(i32::MAX);
        // SAFETY: a loaded function.
        check("cuFuncSetAttribute", unsafe {
            sys::cuFuncSetAttribute(
                self.functions[i],
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes,
            )
        })
    }

    /// Unloads the module. Only when no kernel of it runs (unloading waits for them).
    pub fn unload(self) {
        // SAFETY: the caller guarantees no kernel of the module still runs.
        unsafe {
            sys::cuModuleUnload(self.module);
        }
    }
}

/// A stream.
pub struct Stream(pub sys::CUstream);

// SAFETY: as Module.
unsafe impl Send for Stream {}

/// What a stream is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamState {
    Running,
    Idle,
    Failed(String),
}

impl Stream {
    /// Asks, without waiting, whether the work on the stream has finished.
    pub fn query(&self) -> StreamState {
        // SAFETY: a valid stream; cuStreamQuery does not block.
        let r = unsafe { sys::cuStreamQuery(self.0) };
        match r {
            sys::CUresult::CUDA_SUCCESS => StreamState::Idle,
            sys::CUresult::CUDA_ERROR_NOT_READY => StreamState::Running,
            e => StreamState::Failed(format!("{e:?}")),
        }
    }

    /// Waits for the stream (only for short, bounded work: launches of the floor probes).
    pub fn synchronize(&self) -> Result<(), GpuError> {
        // SAFETY: a valid stream.
        check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(self.0) })
    }

    /// Launches `f` with one block of `threads` and the given parameter pointers.
    ///
    /// # Safety
    /// `params` must point to values whose types and order match the kernel's parameters,
    /// living until the launch returns; memory the kernel touches must outlive the kernel.
    pub unsafe fn launch(&self, f: sys::CUfunction, threads: u32, params: &mut [*mut c_void]) -> Result<(), GpuError> {
        self.launch_shared(f, threads, 0, params)
    }

    /// [`Stream::launch`] with `shared` bytes of dynamic shared memory (more than 48 KiB only
    /// after [`Module::allow_dynamic_shared`]).
    ///
    /// # Safety
    /// As [`Stream::launch`].
    pub unsafe fn launch_shared(
        &self,
        f: sys::CUfunction,
        threads: u32,
        shared: u32,
        params: &mut [*mut c_void],
    ) -> Result<(), GpuError> {
        check(
            "cuLaunchKernel",
            sys::cuLaunchKernel(f, 1, 1, 1, threads, 1, 1, shared, self.0, params.as_mut_ptr(), std::ptr::null_mut()),
        )
    }
}
