//! Writing a remote object: [`RemoteWriter`], a multipart upload fed from device or host memory.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use hipfile::{AsDevice, Driver, Error, ErrorKind};
use hipfile_hip::DeviceRange;

use crate::aws::AwsConfig;
use crate::client::Client;
use crate::error::{RemoteError, Result};
use crate::lanes::DriverLanes;
use crate::location::{Action, Object, ObjectUrl};
use crate::options::RemoteOptions;

/// S3's most parts in one upload.
const MAX_PARTS: usize = 10_000;

/// A new remote object (`s3://` only) written front to back, appearing whole at
/// [`RemoteWriter::finish`] or not at all.
///
/// Bytes are appended by [`RemoteWriter::write`] (device memory) and
/// [`RemoteWriter::write_host`]; every full part (the request size, at least 5 MiB) is uploaded
/// as one part of a multipart upload, up to `connections` parts at once, before the call
/// returns. Device bytes of whole parts are copied into pinned staging halves and uploaded from
/// there (the copy of the next part runs while the current one uploads); host bytes of whole
/// parts are uploaded straight from the caller's memory. Bytes that do not fill a part wait in
/// the writer until more come or [`finish`](RemoteWriter::finish). An object smaller than one
/// part is one PUT at `finish`.
///
/// Any failure aborts the upload, and the writer refuses further writes; dropping the writer
/// without `finish` aborts it too. No partial object is ever visible.
#[derive(Debug)]
pub struct RemoteWriter {
    client: Client,
    lanes: Arc<DriverLanes>,
    /// Bytes of the part being filled.
    pending: Vec<u8>,
    upload_id: Option<String>,
    /// The uploaded parts' ETags, part 1 first.
    etags: Vec<String>,
    written: u64,
    failed: bool,
}

/// One part to upload: its number and where its bytes are.
enum PartSource<'a> {
    Host(&'a [u8]),
    Device(DeviceRange),
}

impl RemoteWriter {
    /// Start writing the object at `url` (`s3://bucket/key`; endpoint, region and credentials
    /// from the environment and the AWS files), from memory of `driver`'s GPU runtime. Nothing is
    /// sent before the first full part or `finish`.
    pub fn create(driver: &Driver, url: &str, options: RemoteOptions) -> Result<RemoteWriter> {
        Self::create_with(driver, url, options, None)
    }

    /// [`RemoteWriter::create`] with the AWS configuration given (`None`: read it).
    pub fn create_with(
        driver: &Driver,
        url: &str,
        options: RemoteOptions,
        aws: Option<&AwsConfig>,
    ) -> Result<RemoteWriter> {
        options.validate()?;
        let parsed = ObjectUrl::parse(url)?;
        let object = Object::resolve(&parsed, aws)?;
        // Refuses plain HTTP now rather than at the first part.
        object.url(Action::Put)?;
        let lanes = DriverLanes::of(driver)?;
        let client = Client::new(
            object,
            parsed.to_string(),
            options,
            Arc::clone(&lanes.counters),
        );
        Ok(RemoteWriter {
            client,
            lanes,
            pending: Vec::new(),
            upload_id: None,
            etags: Vec::new(),
            written: 0,
            failed: false,
        })
    }

    /// Bytes appended so far (uploaded or waiting for their part to fill).
    pub fn written(&self) -> u64 {
        self.written
    }

    fn part_size(&self) -> usize {
        self.client.options().part_size()
    }

    fn check_usable(&self) -> Result<()> {
        if self.failed {
            return Err(RemoteError::Unsupported(format!(
                "{}: an earlier failure aborted this upload",
                self.client.name()
            )));
        }
        Ok(())
    }

    /// Append the bytes of device memory `src` (its whole length). Returns `src`'s length once
    /// its whole parts are uploaded.
    pub fn write(&mut self, src: impl AsDevice) -> Result<usize> {
        self.check_usable()?;
        let slice = src.as_device();
        let len = slice.len();
        if len == 0 {
            return Ok(0);
        }
        let range = DeviceRange::query(&self.lanes.runtime, slice.ptr(), len)
            .map_err(|e| RemoteError::Device(Error::hip(&e, "the write's source")))?;
        let part = self.part_size();
        let head = (part - self.pending.len()).min(len);
        let whole = (len - head) / part * part;
        let result = self.copy_to_pending(&range, 0, head).and_then(|()| {
            let mut parts = Vec::new();
            if self.pending.len() == part {
                parts.push(PartSource::Host(&self.pending));
            }
            for at in (head..head + whole).step_by(part) {
                parts.push(PartSource::Device(device_piece(&range, at, part)?));
            }
            upload_parts(
                &self.client,
                &self.lanes,
                &mut self.upload_id,
                &mut self.etags,
                parts,
            )
        });
        let result = result.and_then(|()| {
            if self.pending.len() == part {
                self.pending.clear();
            }
            self.copy_to_pending(&range, head + whole, len - head - whole)
        });
        self.settle(result)?;
        self.written += len as u64;
        Ok(len)
    }

    /// Append `src`. Returns its length once its whole parts are uploaded.
    pub fn write_host(&mut self, src: &[u8]) -> Result<usize> {
        self.check_usable()?;
        let part = self.part_size();
        let head = (part - self.pending.len()).min(src.len());
        self.pending.extend_from_slice(&src[..head]);
        let rest = &src[head..];
        let whole = rest.len() / part * part;
        let mut parts = Vec::new();
        if self.pending.len() == part {
            parts.push(PartSource::Host(&self.pending));
        }
        parts.extend(rest[..whole].chunks(part).map(PartSource::Host));
        let result = upload_parts(
            &self.client,
            &self.lanes,
            &mut self.upload_id,
            &mut self.etags,
            parts,
        );
        self.settle(result)?;
        if self.pending.len() == part {
            self.pending.clear();
        }
        self.pending.extend_from_slice(&rest[whole..]);
        self.written += src.len() as u64;
        Ok(src.len())
    }

    /// Copy `len` device bytes at `at` of `range` to the end of the pending part.
    fn copy_to_pending(&mut self, range: &DeviceRange, at: usize, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let start = self.pending.len();
        self.pending.resize(start + len, 0);
        device_piece(range, at, len)?
            .copy_to_host(&mut self.pending[start..])
            .map_err(|e| RemoteError::Device(Error::hip(&e, "copying device bytes to host")))
    }

    /// On failure, abort the upload and refuse further writes; an abort that fails too is told
    /// in the error ([`RemoteError::UploadLeft`]).
    fn settle(&mut self, result: Result<()>) -> Result<()> {
        let Err(failure) = result else {
            return Ok(());
        };
        self.failed = true;
        match self.abort() {
            Ok(()) => Err(failure),
            Err((upload_id, abort)) => Err(RemoteError::UploadLeft {
                failure: Box::new(failure),
                upload_id,
                abort: Box::new(abort),
            }),
        }
    }

    /// Abort the upload, if one was started; on failure, its id and why.
    fn abort(&mut self) -> std::result::Result<(), (String, RemoteError)> {
        let Some(id) = self.upload_id.take() else {
            return Ok(());
        };
        self.client.abort_upload(&id).map_err(|e| {
            log::warn!(
                "{}: aborting upload {id}: {e}; its parts stay on the server until it is \
                 aborted or expires",
                self.client.name()
            );
            (id, e)
        })
    }

    /// Make the object: upload what is pending as the last part and complete the upload (or,
    /// for an object smaller than one part, PUT it whole). Returns the object's size.
    pub fn finish(mut self) -> Result<u64> {
        self.check_usable()?;
        let result = self.complete();
        self.settle(result)?;
        Ok(self.written)
    }

    fn complete(&mut self) -> Result<()> {
        let Some(id) = self.upload_id.clone() else {
            self.client.put(Action::Put, &self.pending)?;
            return Ok(());
        };
        if !self.pending.is_empty() {
            let last = vec![PartSource::Host(&self.pending)];
            upload_parts(
                &self.client,
                &self.lanes,
                &mut self.upload_id,
                &mut self.etags,
                last,
            )?;
        }
        self.client.complete_upload(&id, &self.etags)?;
        // Completed: nothing left to abort.
        self.upload_id = None;
        Ok(())
    }
}

impl Drop for RemoteWriter {
    fn drop(&mut self) {
        // Finished writers hold no upload; an unfinished one is abandoned whole (a failed abort
        // is logged: a drop has no one to tell).
        let _ = self.abort();
    }
}

fn device_piece(range: &DeviceRange, at: usize, len: usize) -> Result<DeviceRange> {
    range.slice(at, len).ok_or_else(|| {
        RemoteError::Device(Error::new(
            ErrorKind::InternalError,
            "a part outside its write's memory",
        ))
    })
}

/// Upload `parts` as the next parts of the upload (started here if need be), up to
/// `connections` at once; their ETags are appended in part order.
fn upload_parts(
    client: &Client,
    lanes: &DriverLanes,
    upload_id: &mut Option<String>,
    etags: &mut Vec<String>,
    parts: Vec<PartSource<'_>>,
) -> Result<()> {
    if parts.is_empty() {
        return Ok(());
    }
    let first = etags.len() + 1;
    if first - 1 + parts.len() > MAX_PARTS {
        return Err(RemoteError::Unsupported(format!(
            "{}: more than {MAX_PARTS} parts; raise the request size",
            client.name()
        )));
    }
    let id = match upload_id {
        Some(id) => id.clone(),
        None => upload_id.insert(client.create_upload()?).clone(),
    };
    let count = parts.len();
    let jobs: Vec<(u16, PartSource<'_>)> = parts
        .into_iter()
        .enumerate()
        .map(|(i, p)| ((first + i) as u16, p))
        .collect();
    let jobs = Mutex::new(jobs.into_iter());
    let done = Mutex::new(Vec::with_capacity(count));
    let errors = Mutex::new(None);
    let stop = AtomicUsize::new(0);
    let threads = client.options().connections.min(count);
    let work = || {
        let result = upload_some(client, lanes, &id, &jobs, &done, &stop);
        if let Err(e) = result {
            stop.store(1, Ordering::Relaxed);
            errors
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert(e);
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(work);
        }
        work();
    });
    if let Some(e) = errors.into_inner().unwrap_or_else(PoisonError::into_inner) {
        return Err(e);
    }
    let mut done = done.into_inner().unwrap_or_else(PoisonError::into_inner);
    done.sort_by_key(|(n, _)| *n);
    etags.extend(done.into_iter().map(|(_, etag)| etag));
    Ok(())
}

type Jobs<'a> = Mutex<std::vec::IntoIter<(u16, PartSource<'a>)>>;

/// One thread's share of the parts: host parts go straight out; device parts are copied into
/// one half of the thread's lane while the part in the other half uploads.
fn upload_some(
    client: &Client,
    lanes: &DriverLanes,
    upload_id: &str,
    jobs: &Jobs<'_>,
    done: &Mutex<Vec<(u16, String)>>,
    stop: &AtomicUsize,
) -> Result<()> {
    let part = client.options().part_size();
    let bound = part
        .saturating_mul(2)
        .saturating_mul(client.options().connections.max(1));
    let mut lane = None;
    // The device part whose copy into a half is queued: (part number, half, length).
    let mut queued: Option<(u16, usize, usize)> = None;
    let mut slot = 0;
    let hip = |e: hipfile_hip::HipError, what: &str| RemoteError::Device(Error::hip(&e, what));
    let put = |n: u16, bytes: &[u8]| -> Result<()> {
        let etag = client.put(Action::UploadPart { part: n, upload_id }, bytes)?;
        done.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((n, etag));
        Ok(())
    };
    let result = (|| -> Result<()> {
        loop {
            let job = if stop.load(Ordering::Relaxed) == 0 {
                jobs.lock().unwrap_or_else(PoisonError::into_inner).next()
            } else {
                None
            };
            match job {
                Some((n, PartSource::Host(bytes))) => put(n, bytes)?,
                Some((n, PartSource::Device(range))) => {
                    let lane = match &mut lane {
                        Some(l) => l,
                        None => lane.insert(lanes.lane(range.device(), part, bound)?),
                    };
                    lane.download(slot, &range)
                        .map_err(|e| hip(e, "copying a part to a staging half"))?;
                    let previous = queued.replace((n, slot, range.len()));
                    slot ^= 1;
                    if let Some((pn, pslot, plen)) = previous {
                        let half = lane
                            .half(pslot)
                            .map_err(|e| hip(e, "waiting for a staged part"))?;
                        put(pn, &half[..plen])?;
                    }
                }
                None => break,
            }
        }
        if let (Some((n, s, len)), Some(lane)) = (queued.take(), &mut lane) {
            if stop.load(Ordering::Relaxed) == 0 {
                let half = lane
                    .half(s)
                    .map_err(|e| hip(e, "waiting for a staged part"))?;
                put(n, &half[..len])?;
            }
        }
        Ok(())
    })();
    let drained = match &mut lane {
        Some(l) => l
            .finish()
            .map_err(|e| hip(e, "finishing the staged copies")),
        None => Ok(()),
    };
    result.and(drained)
}
