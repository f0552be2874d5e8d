"""Infrastructure shared by every op: the kernel loader (the only maker of ``RawModule``s),
launch plans and their one cache, scratch buffers, PDL launches, TMA tensor maps, device
facts, dtypes and input validation."""
