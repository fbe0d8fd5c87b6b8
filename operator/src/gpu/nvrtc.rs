//! Run-time kernel compilation with NVRTC, to a cubin for the device's architecture, cached
//! on disk.
//!
//! Cache key: SHA-256 of the NVRTC version, the target architecture, the options and every
//! source (name and text). The cache folder is `$ROCELINK_KERNEL_CACHE`, else
//! `$XDG_CACHE_HOME/rocelink/kernels`, else `~/.cache/rocelink/kernels`; files are written
//! to a temporary name and renamed, so a crash never leaves a torn cubin. A compile error
//! returns NVRTC's log.

use std::ffi::{c_char, CString};
use std::path::PathBuf;

use cudarc::nvrtc::sys;
use sha2::{Digest, Sha256};

use super::driver::GpuError;

/// One source file: the name `#include` uses, and its text.
#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub text: String,
}

/// Is the NVRTC library loadable?
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the library.
    unsafe { sys::is_culib_present() }
}

/// For tests that compile kernels without a GPU: true when NVRTC is here; otherwise says on
/// stderr that `what` did nothing, and panics under CI (`CI` set), where `.ci/run` installs the
/// `nvidia-cuda-nvrtc` wheel, so that a kernel that stopped compiling cannot pass unseen.
pub fn present_or_skip(what: &str) -> bool {
    if nvrtc_present() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must provide libnvrtc.so.13 (.ci/run installs the nvidia-cuda-nvrtc wheel)"
    );
    eprintln!("SKIPPED {what}: libnvrtc not found; `pip install nvidia-cuda-nvrtc==13.0.88` and put its lib folder on LD_LIBRARY_PATH to run it");
    false
}

/// NVRTC's version (major, minor).
pub fn version() -> Result<(i32, i32), GpuError> {
    if !nvrtc_present() {
        return Err(GpuError::Nvrtc("libnvrtc not found (install the CUDA toolkit or the nvidia-cuda-nvrtc wheel and put it on the loader path)".into()));
    }
    let (mut a, mut b) = (0, 0);
    // SAFETY: two out-pointers.
    let r = unsafe { sys::nvrtcVersion(&mut a, &mut b) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(GpuError::Nvrtc(format!("nvrtcVersion: {r:?}")));
    }
    Ok((a, b))
}

/// Where compiled kernels are cached.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("ROCELINK_KERNEL_CACHE") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("rocelink").join("kernels")
}

/// The outcome of [`compile`].
#[derive(Debug, Clone)]
pub struct Compiled {
    pub cubin: Vec<u8>,
    pub from_cache: bool,
    pub key: String,
    pub millis: f64,
}

fn cache_key(nvrtc: (i32, i32), arch: &str, options: &[String], main: &Source, headers: &[Source]) -> String {
    let mut h = Sha256::new();
    h.update(format!("nvrtc {}.{}\0arch {arch}\0", nvrtc.0, nvrtc.1));
    for o in options {
        h.update(o.as_bytes());
        h.update([0]);
    }
    for s in std::iter::once(main).chain(headers) {
        h.update(s.name.as_bytes());
        h.update([0]);
        h.update(s.text.as_bytes());
        h.update([0]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Compiles `main` (with `headers` available to `#include "name"`) to a cubin for `arch`
/// (`sm_90`), using the cache unless `use_cache` is false.
pub fn compile(
    main: &Source,
    headers: &[Source],
    arch: &str,
    options: &[String],
    use_cache: bool,
) -> Result<Compiled, GpuError> {
    let ver = version()?;
    let key = cache_key(ver, arch, options, main, headers);
    let path = cache_dir().join(format!("{key}.cubin"));
    let t0 = std::time::Instant::now();
    if use_cache {
        if let Ok(cubin) = std::fs::read(&path) {
            if !cubin.is_empty() {
                return Ok(Compiled { cubin, from_cache: true, key, millis: t0.elapsed().as_secs_f64() * 1e3 });
            }
        }
    }
    let cubin = compile_uncached(main, headers, arch, options)?;
    if use_cache {
        let _ = std::fs::create_dir_all(cache_dir());
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &cubin).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
    Ok(Compiled { cubin, from_cache: false, key, millis: t0.elapsed().as_secs_f64() * 1e3 })
}

fn nvrtc_check(what: &str, r: sys::nvrtcResult) -> Result<(), GpuError> {
    if r == sys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(GpuError::Nvrtc(format!("{what}: {r:?}")))
    }
}

fn compile_uncached(main: &Source, headers: &[Source], arch: &str, options: &[String]) -> Result<Vec<u8>, GpuError> {
    let cstr = |s: &str| CString::new(s).map_err(|_| GpuError::Nvrtc("a source contains a NUL byte".into()));
    let src = cstr(&main.text)?;
    let name = cstr(&main.name)?;
    let hdr_texts = headers.iter().map(|h| cstr(&h.text)).collect::<Result<Vec<_>, _>>()?;
    let hdr_names = headers.iter().map(|h| cstr(&h.name)).collect::<Result<Vec<_>, _>>()?;
    let hdr_text_ptrs: Vec<*const c_char> = hdr_texts.iter().map(|c| c.as_ptr()).collect();
    let hdr_name_ptrs: Vec<*const c_char> = hdr_names.iter().map(|c| c.as_ptr()).collect();
    let mut opts: Vec<CString> = vec![cstr(&format!("--gpu-architecture={arch}"))?, cstr("-std=c++17")?];
    for o in options {
        opts.push(cstr(o)?);
    }
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|c| c.as_ptr()).collect();
    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer refers to a NUL-terminated string alive for this function; the
    // header arrays have `headers.len()` entries; the program is destroyed on every path.
    unsafe {
        nvrtc_check(
            "nvrtcCreateProgram",
            sys::nvrtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                headers.len() as i32,
                hdr_text_ptrs.as_ptr(),
                hdr_name_ptrs.as_ptr(),
            ),
        )?;
        let r = sys::nvrtcCompileProgram(prog, opt_ptrs.len() as i32, opt_ptrs.as_ptr());
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            let mut n = 0usize;
            sys::nvrtcGetProgramLogSize(prog, &mut n);
            let mut log = vec![0u8; n.max(1)];
            sys::nvrtcGetProgramLog(prog, log.as_mut_ptr() as *mut c_char);
            sys::nvrtcDestroyProgram(&mut prog);
            let log = String::from_utf8_lossy(&log).trim_end_matches('\0').to_string();
            return Err(GpuError::Compile { arch: arch.to_string(), log });
        }
        let mut n = 0usize;
        let r = sys::nvrtcGetCUBINSize(prog, &mut n);
        if r != sys::nvrtcResult::NVRTC_SUCCESS || n == 0 {
            sys::nvrtcDestroyProgram(&mut prog);
            return Err(GpuError::Nvrtc(format!("nvrtcGetCUBINSize: {r:?} (is `{arch}` a real architecture?)")));
        }
        let mut cubin = vec![0u8; n];
        let r = sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr() as *mut c_char);
        sys::nvrtcDestroyProgram(&mut prog);
        nvrtc_check("nvrtcGetCUBIN", r)?;
        Ok(cubin)
    }
}
