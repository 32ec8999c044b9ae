"""`verify`: what `snbuf verify` checks, in Python, with the same meaning: a burst is valid when
its manifest is sealed (or recovered) and agrees with its files, every link file is a clean run
of valid chunks, and the window frames missing from the data are all accounted for as lost."""


def _coverage(m, link):
    trigger, frame = m.get("trigger"), m.get("frame")
    tpf = (frame or {}).get("frame_step_ticks") or (frame or {}).get("ticks_per_frame")
    if not link.chunks or not trigger or not tpf:
        return None
    first, last = link.chunks[0].first_timestamp, link.chunks[-1].last_timestamp
    ws, we = trigger["window_start_timestamp"], trigger["window_end_timestamp"]
    if first >= ws:
        grid_start = first - (first - ws) // tpf * tpf
    else:
        grid_start = first + -(-(ws - first) // tpf) * tpf
    in_window = (we - 1 - grid_start) // tpf + 1 if grid_start < we else 0
    span_start, span_end = max(first, ws), min(last + tpf, we)
    gap_frames = sum(g["missing_frames"] for g in link.gaps)
    present = max(-(-max(span_end - span_start, 0) // tpf) - gap_frames, 0)
    return {"window_start_timestamp": ws, "window_end_timestamp": we,
            "frames_present": present, "frames_in_window": in_window}


def verify(burst):
    """A report dict: valid, state, burst_id, problems, links (per link: chunks, frames,
    payload_bytes, first/last timestamp, end, gaps, coverage, problems)."""
    problems = []
    m = burst.manifest
    if burst.manifest_problem:
        problems.append(burst.manifest_problem)
    if m is not None:
        state = m.get("state")
        if state == "recording":
            problems.append("burst was never sealed (state: recording)")
        elif state == "failed":
            problems.append("burst is marked failed")
    if not burst.files:
        problems.append("no link data files in the burst")
    records = {l["link"]: l for l in (m or {}).get("links", [])}
    links = []
    for n, name in burst.files.items():
        lv = {"link": n, "file": name, "chunks": 0, "frames": 0, "payload_bytes": 0,
              "first_timestamp": None, "last_timestamp": None, "coverage": None, "gaps": [],
              "end": None, "chunks_after_end": 0, "problems": []}
        links.append(lv)
        if name != f"link-{n:04d}.dat" or "/" in name:
            lv["problems"].append(f"manifest names file '{name}' for link {n}")
            continue
        try:
            link = burst.link(n)
        except (OSError, ValueError) as e:
            # (ValueError: a coded link file that cannot be read at all, its header damaged.)
            lv["problems"].append(str(e))
            continue
        lv.update(chunks=len(link.chunks), frames=link.frames_count, payload_bytes=link.payload_bytes,
                  gaps=link.gaps, end=link.end, chunks_after_end=link.chunks_after_end)
        if link.chunks:
            lv["first_timestamp"] = link.chunks[0].first_timestamp
            lv["last_timestamp"] = link.chunks[-1].last_timestamp
        kind = link.end["kind"]
        if kind == "torn_tail":
            lv["problems"].append(f"torn tail at offset {link.end['offset']} ({link.end['bytes']} B): {link.end['why']}")
        elif kind == "bad_chunk":
            lv["problems"].append(f"bad chunk at offset {link.end['offset']} ({link.end['bytes']} B): {link.end['why']}")
        elif kind == "future_version":
            lv["problems"].append(f"chunk at offset {link.end['offset']} has format version {link.end['version']}, newer than this reader")
        if link.chunks_after_end:
            lv["problems"].append(f"{link.chunks_after_end} valid chunk(s) after the bad one are cut off from the data")
        record = records.get(n)
        if record is None:
            if m is not None:
                lv["problems"].append("link file not listed in the manifest")
            continue
        if record.get("chunks") != lv["chunks"] or record.get("frames") != lv["frames"]:
            lv["problems"].append(f"manifest says {record.get('chunks')} chunks / {record.get('frames')} frames, "
                                  f"the file holds {lv['chunks']} / {lv['frames']}")
        if record.get("error"):
            lv["problems"].append(f"link failed while recording: {record['error']}")
        cov = _coverage(m, link)
        if cov is None:
            continue
        lv["coverage"] = cov
        missing = max(cov["frames_in_window"] - cov["frames_present"], 0)
        if missing > record.get("lost_frames", 0):
            lv["problems"].append(f"{missing} frame(s) of the window are not in the data and the manifest "
                                  f"accounts for {record.get('lost_frames', 0)} lost")
    valid = not problems and all(not l["problems"] for l in links)
    return {"dir": burst.path, "burst_id": (m or {}).get("burst_id"), "state": (m or {}).get("state"),
            "links": links, "problems": problems, "valid": valid}
