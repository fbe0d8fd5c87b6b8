//! One RDMA device's port, opened by name, with its GID.

use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr::NonNull;

use rdma_sys::*;

/// What went wrong, with what the machine has.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    #[error("no RDMA device on this machine (ibv_get_device_list found none{0}): the `verbs` feature's NIC needs a ConnectX with rdma-core's mlx5 provider; without one, use the software NIC (`nic: Soft(wire: Udp(..))`)")]
    NoDevices(String),
    #[error("no RDMA device named {name:?}; this machine has {available}")]
    NotFound { name: String, available: String },
    #[error("{device} port {port}: {what}")]
    Port { device: String, port: u8, what: String },
    #[error("{call}: {err}")]
    Call { call: &'static str, err: std::io::Error },
    #[error("the queue pair's rings are not what the data path writes: {0}")]
    Rings(String),
}

impl VerbsError {
    /// `call` failed with `rc` (a negative errno, a positive one, or -1 with errno set).
    pub(crate) fn call(call: &'static str, rc: c_int) -> VerbsError {
        let err = if rc > 0 {
            std::io::Error::from_raw_os_error(rc)
        } else if rc < -1 {
            std::io::Error::from_raw_os_error(-rc)
        } else {
            std::io::Error::last_os_error()
        };
        VerbsError::Call { call, err }
    }

    /// `call` returned NULL (errno says why).
    pub(crate) fn null(call: &'static str) -> VerbsError {
        VerbsError::Call { call, err: std::io::Error::last_os_error() }
    }
}

/// verbs.h: the port's link layer for RoCE.
const LINK_LAYER_ETHERNET: u8 = 2;

/// An open device and the port and GID the queue pair uses.
pub struct Device {
    ctx: NonNull<ibv_context>,
    pub name: String,
    pub port: u8,
    pub gid_index: u8,
    /// The GID at `gid_index` (for RoCEv2 with IPv4: ::ffff:a.b.c.d, our address).
    pub gid: [u8; 16],
    /// The port's active MTU, in bytes.
    pub mtu: u32,
    /// The active MTU as verbs names it (`ibv_mtu`), for the path MTU.
    pub(crate) mtu_enum: ibv_mtu::Type,
}

// SAFETY: an ibv_context may be used from any thread (libibverbs locks what it shares).
unsafe impl Send for Device {}

impl Device {
    /// Opens `name` (e.g. "mlx5_0") and checks `port` and its GID at `gid_index`.
    pub fn open(name: &str, port: u8, gid_index: u8) -> Result<Device, VerbsError> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer; the list is freed below, after its devices are
        // named and the one wanted is opened (ibv_open_device keeps no pointer into it).
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(VerbsError::NoDevices(format!(": {}", std::io::Error::last_os_error())));
        }
        let count = usize::try_from(n).unwrap_or(0);
        // SAFETY: the list holds `n` device pointers (then a NULL).
        let devices: Vec<*mut ibv_device> = (0..count).map(|i| unsafe { *list.add(i) }).collect();
        // SAFETY: each device's name is a NUL-terminated string owned by the list.
        let names: Vec<String> = devices
            .iter()
            .map(|&d| unsafe { CStr::from_ptr(ibv_get_device_name(d)) }.to_string_lossy().into_owned())
            .collect();
        let opened = names.iter().position(|n| n == name).map(|i| {
            // SAFETY: a device of the live list.
            let ctx = unsafe { ibv_open_device(devices[i]) };
            (ctx, std::io::Error::last_os_error())
        });
        // SAFETY: the list from ibv_get_device_list, freed once.
        unsafe { ibv_free_device_list(list) };
        if names.is_empty() {
            return Err(VerbsError::NoDevices(String::new()));
        }
        let Some((ctx, err)) = opened else {
            return Err(VerbsError::NotFound { name: name.to_string(), available: names.join(", ") });
        };
        let ctx = NonNull::new(ctx).ok_or(VerbsError::Call { call: "ibv_open_device", err })?;
        let mut dev = Device {
            ctx,
            name: name.to_string(),
            port,
            gid_index,
            gid: [0; 16],
            mtu: 0,
            mtu_enum: ibv_mtu::IBV_MTU_1024,
        };
        dev.query()?;
        Ok(dev)
    }

    pub(crate) fn ctx(&self) -> *mut ibv_context {
        self.ctx.as_ptr()
    }

    fn port_error(&self, what: String) -> VerbsError {
        VerbsError::Port { device: self.name.clone(), port: self.port, what }
    }

    fn query(&mut self) -> Result<(), VerbsError> {
        // SAFETY: a zeroed ibv_port_attr is a valid out-value (plain integers).
        let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: an open context and a valid out-pointer.
        let rc = unsafe { ___ibv_query_port(self.ctx(), self.port, &mut attr) };
        if rc != 0 {
            return Err(self.port_error(format!(
                "ibv_query_port: {} (ports are numbered from 1)",
                std::io::Error::from_raw_os_error(rc.abs())
            )));
        }
        self.mtu = check_port(attr.state, attr.link_layer, attr.active_mtu).map_err(|w| self.port_error(w))?;
        self.mtu_enum = attr.active_mtu;
        if i32::from(self.gid_index) >= attr.gid_tbl_len {
            return Err(self
                .port_error(format!("GID index {} is past the port's table of {}", self.gid_index, attr.gid_tbl_len)));
        }
        // SAFETY: a zeroed GID is a valid out-value.
        let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: an open context, a port and index checked above, a valid out-pointer.
        let rc = unsafe { ibv_query_gid(self.ctx(), self.port, c_int::from(self.gid_index), &mut gid) };
        if rc != 0 {
            return Err(VerbsError::call("ibv_query_gid", rc));
        }
        // SAFETY: both views of the union are plain bytes.
        self.gid = unsafe { gid.raw };
        if self.gid == [0; 16] {
            return Err(self.port_error(format!(
                "GID index {} is empty (RoCEv2 with IPv4 is usually index 3; `show_gids` lists the table)",
                self.gid_index
            )));
        }
        Ok(())
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: opened by ibv_open_device, closed once; the queue pair (which borrows the
        // device) is gone by now.
        unsafe { ibv_close_device(self.ctx()) };
    }
}

/// The port must be active and Ethernet (RoCE); its MTU in bytes.
pub fn check_port(state: ibv_port_state::Type, link_layer: u8, active_mtu: ibv_mtu::Type) -> Result<u32, String> {
    if state != ibv_port_state::IBV_PORT_ACTIVE {
        let s = match state {
            ibv_port_state::IBV_PORT_DOWN => "down",
            ibv_port_state::IBV_PORT_INIT => "initializing",
            ibv_port_state::IBV_PORT_ARMED => "armed",
            _ => "not active",
        };
        return Err(format!("the port is {s} (state {state}): is the cable in and the link up?"));
    }
    if link_layer != LINK_LAYER_ETHERNET {
        return Err(format!("the port's link layer is {} , not Ethernet: RoCE needs an Ethernet port (an InfiniBand port cannot reach an HSB FPGA)", if link_layer == 1 { "InfiniBand" } else { "unspecified" }));
    }
    mtu_bytes(active_mtu).ok_or_else(|| format!("the port reports an unknown MTU ({active_mtu})"))
}

/// `ibv_mtu` in bytes.
pub fn mtu_bytes(m: ibv_mtu::Type) -> Option<u32> {
    match m {
        ibv_mtu::IBV_MTU_256 => Some(256),
        ibv_mtu::IBV_MTU_512 => Some(512),
        ibv_mtu::IBV_MTU_1024 => Some(1024),
        ibv_mtu::IBV_MTU_2048 => Some(2048),
        ibv_mtu::IBV_MTU_4096 => Some(4096),
        _ => None,
    }
}

/// A GID as text: the IPv4 address of an IPv4-mapped one, else IPv6 notation.
pub(crate) fn gid_text(g: &[u8; 16]) -> String {
    let v6 = std::net::Ipv6Addr::from(*g);
    match v6.to_ipv4_mapped() {
        Some(v4) => format!("::ffff:{v4}"),
        None => v6.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_must_be_active_ethernet() {
        assert_eq!(check_port(ibv_port_state::IBV_PORT_ACTIVE, LINK_LAYER_ETHERNET, ibv_mtu::IBV_MTU_4096), Ok(4096));
        assert!(check_port(ibv_port_state::IBV_PORT_DOWN, LINK_LAYER_ETHERNET, ibv_mtu::IBV_MTU_4096)
            .unwrap_err()
            .contains("down"));
        assert!(check_port(ibv_port_state::IBV_PORT_ACTIVE, 1, ibv_mtu::IBV_MTU_4096)
            .unwrap_err()
            .contains("InfiniBand"));
        assert!(check_port(ibv_port_state::IBV_PORT_ACTIVE, LINK_LAYER_ETHERNET, 9)
            .unwrap_err()
            .contains("unknown MTU"));
        assert_eq!(mtu_bytes(ibv_mtu::IBV_MTU_1024), Some(1024));
    }

    #[test]
    fn gids_read_as_addresses() {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[192, 168, 0, 7]);
        assert_eq!(gid_text(&g), "::ffff:192.168.0.7");
        assert_eq!(gid_text(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]), "fe80::1");
    }

    /// The hardware boundary: on a machine without an RDMA device (CI, the Rust machine,
    /// the GPU machine), opening one says so and what it needs; with devices, a wrong name
    /// lists them.
    #[test]
    fn opening_a_device_says_what_is_missing() {
        match Device::open("mlx5_0_rocelink_test_missing", 1, 3) {
            Err(VerbsError::NoDevices(_)) => {
                let e = Device::open("mlx5_0", 1, 3).err().expect("no devices").to_string();
                assert!(e.contains("no RDMA device") && e.contains("ConnectX") && e.contains("`verbs` feature"), "{e}");
            }
            Err(VerbsError::NotFound { name, available }) => {
                assert!(name.ends_with("missing") && !available.is_empty())
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a device with the test's made-up name"),
        }
    }
}
