//! A page mapped with no access at all, for the tests of an address the process cannot touch.

/// A page mapped with no access at all (kept mapped while the value lives, so no other thread's
/// mapping can take its address, as one freshly unmapped could): the process can neither read
/// nor write it.
pub struct NoAccessPage(usize);

impl NoAccessPage {
    pub fn new() -> Self {
        // SAFETY: a fresh anonymous mapping of one page that nothing dereferences.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        NoAccessPage(p as usize)
    }

    /// The page's first address.
    pub fn addr(&self) -> usize {
        self.0
    }
}

impl Drop for NoAccessPage {
    fn drop(&mut self) {
        // SAFETY: the page this value mapped, unmapped once.
        unsafe { libc::munmap(self.0 as *mut libc::c_void, 4096) };
    }
}
