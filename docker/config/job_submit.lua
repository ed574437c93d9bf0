--[[
slurm-rl: job_submit.lua, slurmctld's gate for the slurm-rl tag in job comments.

Rendered by `slurm-rl admin job-submit-lua` from the [trust] section of the slurm-rl config
(template: slurm_rl/data/job_submit.lua.in). Do not edit the rendered file: change the config,
render again, then `scontrol reconfigure`. docs/admin.md says how to enable it, docs/security.md
what a user may claim.

A job comment may end with slurm-rl's part:   <user text> {rl1:<intent>}{rlp:<progress>}
  slurm_job_submit: a comment that holds "{rl1:" or "{rlp:" must carry each tag at most once,
    at the end, with every value in bounds (the bounds of slurm_rl/submit/tags.py, ASCII digits
    only), a deadline within the site's horizon, and the class "critical" only where the site
    granted it (user, account or QOS). Otherwise the job is refused with a "slurm-rl: ..."
    message to the submitting user.
  slurm_job_modify: the intent is fixed at submission. Only an operator may add, change or
    remove it later; the job's owner may rewrite the rest of the comment, including the
    progress part (checked as above).
Operators (OPERATOR_UIDS: root and SlurmUser) are trusted: what they submit or update passes
unchecked. The slurm-rl daemon validates every comment again, whether or not this plugin runs.
A comment without "{rl1:" / "{rlp:" is not looked at. Lua 5.1: numbers are doubles (exact
below 2^53).
]]

-- Site grants (rendered from [trust]) -------------------------------------------------------
local CRITICAL_USERS = {["slurmrl-crit"] = true}
local CRITICAL_ACCOUNTS = {["rl-critical"] = true}
local CRITICAL_QOS = {["critical"] = true}
local OPERATOR_UIDS = {[0] = true}
local DEADLINE_HORIZON_S = 7776000
local DEADLINE_HORIZON_TEXT = "90 days"

-- Bounds (rendered from slurm_rl/submit/tags.py) --------------------------------------------
local MAX_INT = 9007199254740991
local MAX_DIGITS = 16
local MAX_GPUS = 4096
local MIN_EPOCH = 946684800
local MAX_EPOCH = 4102444800
local MAX_PART_BYTES = 200
local MAX_COMMENT_BYTES = 1000
local MAX_MODEL_CHARS = 40
local CLASSES = {["besteffort"] = true, ["critical"] = true, ["standard"] = true}

-- A printable, short excerpt of user text for a message: never the raw bytes.
local function shown(text)
  local s = string.gsub(text, "[^\032-\126]", "?")
  if #s > 40 then
    s = string.sub(s, 1, 37) .. "..."
  end
  return s
end

local function has_tag(comment)
  return string.find(comment, "{rl1:", 1, true) ~= nil
      or string.find(comment, "{rlp:", 1, true) ~= nil
end

-- ASCII digits only, at most MAX_DIGITS of them, value in lo..hi (tags.ascii_int); else nil.
local function ascii_int(text, lo, hi)
  if #text == 0 or #text > MAX_DIGITS or string.find(text, "[^0-9]") then
    return nil
  end
  local value = tonumber(text)
  if value == nil or value < lo or value > hi then
    return nil
  end
  return value
end

-- Epoch seconds: ASCII digits, optionally '.' and 1 to 3 more (tags.ascii_stamp).
local function ascii_stamp(text, lo, hi)
  local whole, frac = string.match(text, "^([0-9]+)%.([0-9]+)$")
  if whole == nil then
    return ascii_int(text, lo, hi)
  end
  if #frac > 3 or ascii_int(whole, lo, hi) == nil then
    return nil
  end
  local value = tonumber(text)
  if value == nil or value > hi then
    return nil
  end
  return value
end

-- A finite number written with ASCII digits, '.', 'e' and signs only (tags.ascii_float).
local function ascii_float(text, lo, hi)
  if #text == 0 or #text > 32 or string.find(text, "[^0-9.eE+-]") then
    return nil
  end
  local value = tonumber(text)
  if value == nil or value ~= value or value < lo or value > hi then
    return nil
  end
  return value
end

-- The comment's slurm-rl part: {user=, intent=, progress=} (intent/progress: the tag bodies,
-- nil when absent), or nil and a reason when a tag is not exactly once at the end.
local function split(comment)
  if not has_tag(comment) then
    return {user = comment}
  end
  local misplaced = "a slurm-rl tag ({rl1:...} then {rlp:...}) may appear once, at the end "
      .. "of the comment, after a space"
  local rest, progress = string.match(comment, "^(.*){rlp:([^{}]*)}$")
  if rest == nil then
    rest = comment
  end
  local user, intent = string.match(rest, "^(.*){rl1:([^{}]*)}$")
  if user == nil then
    user = rest
  end
  if intent == nil and progress == nil then
    return nil, misplaced
  end
  if user ~= "" then
    if string.sub(user, -1) ~= " " then
      return nil, misplaced
    end
    user = string.sub(user, 1, -2)
  end
  if has_tag(user) then
    return nil, misplaced
  end
  local ours = 0
  if intent ~= nil then
    ours = ours + #intent + 6
  end
  if progress ~= nil then
    ours = ours + #progress + 6
  end
  if ours > MAX_PART_BYTES then
    return nil, string.format("the slurm-rl tags take %d bytes, at most %d", ours,
                              MAX_PART_BYTES)
  end
  if #comment > MAX_COMMENT_BYTES then
    return nil, string.format("a comment with a slurm-rl tag may take at most %d bytes (%d)",
                              MAX_COMMENT_BYTES, #comment)
  end
  return {user = user, intent = intent, progress = progress}
end

-- Checks an intent body; returns its service class and its canonical text (what rlsbatch's
-- encoder writes for the same intent), or nil and a reason. `now` nil: no horizon check.
local function check_intent(body, now)
  local seen, f = {}, {}
  local class = "standard"
  for item in string.gmatch(body .. ",", "([^,]*),") do
    if item ~= "" then
      local key, value = string.match(item, "^([^=]*)=(.*)$")
      if key == nil then
        key = item
      end
      local what = "intent field '" .. shown(item) .. "'"
      if seen[key] then
        return nil, "intent key '" .. shown(key) .. "' given twice"
      end
      seen[key] = true
      if key == "h" or key == "e" then
        if value ~= nil then
          return nil, what .. ": a flag takes no value"
        end
      elseif value == nil then
        return nil, what .. ": unknown key (valid: d, h, c, g, e, s, m, b, i)"
      elseif key == "d" then
        local d = ascii_int(value, MIN_EPOCH, MAX_EPOCH)
        if d == nil then
          return nil, what .. ": the deadline must be epoch seconds in ASCII digits, between "
              .. "2000 and 2100"
        end
        if now ~= nil and d > now + DEADLINE_HORIZON_S then
          return nil, string.format("%s: the deadline is more than %s ahead (this site's "
              .. "horizon)", what, DEADLINE_HORIZON_TEXT)
        end
        f.d = string.format("d=%.0f", d)
      elseif key == "c" then
        -- exactly as written by rlsbatch: the decoder takes no other spelling
        if not CLASSES[value] then
          return nil, what .. ": unknown class (valid: critical, standard, besteffort)"
        end
        class = value
        if value ~= "standard" then
          f.c = "c=" .. value
        end
      elseif key == "g" then
        local lo, hi = string.match(value, "^([^-]*)-(.*)$")
        local glo = lo == "" or (lo ~= nil and ascii_int(lo, 1, MAX_GPUS))
        local ghi = hi == "" or (hi ~= nil and ascii_int(hi, 1, MAX_GPUS))
        if lo == nil or (lo == "" and hi == "") or not glo or not ghi
            or (lo ~= "" and hi ~= "" and glo > ghi) then
          return nil, string.format("%s: a GPU range is min-max in ASCII digits, 1..%d, "
              .. "min <= max", what, MAX_GPUS)
        end
        f.g = string.format("g=%s-%s", glo == true and "" or string.format("%.0f", glo),
                            ghi == true and "" or string.format("%.0f", ghi))
      elseif key == "s" or key == "b" then
        local n = ascii_int(value, 1, MAX_INT)
        if n == nil then
          return nil, string.format("%s: must be a whole number 1..%.0f in ASCII digits",
                                    what, MAX_INT)
        end
        f[key] = string.format("%s=%.0f", key, n)
      elseif key == "m" or key == "i" then
        -- m: the training model; i: an inference job's model (a name only, never a path)
        if #value < 1 or #value > MAX_MODEL_CHARS or string.find(value, "[^A-Za-z0-9_.-]") then
          return nil, string.format("%s: a model name is 1-%d letters, digits, '_', '.' or "
              .. "'-'", what, MAX_MODEL_CHARS)
        end
        f[key] = key .. "=" .. value
      else
        return nil, what .. ": unknown key (valid: d, h, c, g, e, s, m, b, i)"
      end
    end
  end
  f.h = seen.h and "h" or nil
  f.e = seen.e and "e" or nil
  local canonical = {}
  for _, key in ipairs({"d", "h", "c", "g", "e", "s", "m", "b", "i"}) do
    if f[key] ~= nil then
      canonical[#canonical + 1] = f[key]
    end
  end
  return class, table.concat(canonical, ",")
end

-- The intent of a split comment as comparable text: canonical when it is valid, else raw (so
-- `slurm-rl progress`, which rewrites the intent in rlsbatch's spelling, changes nothing).
local function intent_key(parts)
  if parts.intent == nil then
    return nil
  end
  local class, canonical = check_intent(parts.intent, nil)
  if class == nil then
    return "raw:" .. parts.intent
  end
  return canonical
end

-- Checks a progress body (done[/total][@rate][;t=epoch]); returns true, or nil and a reason.
local function check_progress(body)
  local bad = "progress tag '{rlp:" .. shown(body) .. "}': "
  local main, tail = string.match(body, "^([^;]*);(.*)$")
  if main == nil then
    main = body
  end
  if tail ~= nil then
    local t = string.match(tail, "^t=(.*)$")
    if t == nil or ascii_stamp(t, 0, MAX_EPOCH) == nil then
      return nil, bad .. "the time is ';t=' and epoch seconds before 2100 (to the millisecond)"
    end
  end
  local steps, rate = string.match(main, "^([^@]*)@(.*)$")
  if steps == nil then
    steps = main
  end
  if rate ~= nil and ascii_float(rate, 0, MAX_INT) == nil then
    return nil, bad .. "the rate must be a finite number >= 0"
  end
  local done_text, total_text = string.match(steps, "^([^/]*)/(.*)$")
  if done_text == nil then
    done_text = steps
  end
  local done = ascii_int(done_text, 0, MAX_INT)
  if done == nil then
    return nil, bad .. "steps done must be a whole number in ASCII digits"
  end
  if total_text ~= nil then
    local total = ascii_int(total_text, 1, MAX_INT)
    if total == nil or done > total then
      return nil, bad .. "the total must be a whole number >= 1 and >= steps done"
    end
  end
  return true
end

local function critical_granted(job_desc)
  local user = job_desc.user_name
  if user ~= nil and CRITICAL_USERS[user] then
    return true
  end
  -- With accounting, a job without -A/--qos runs under its default account / QOS.
  local account = job_desc.account or job_desc.default_account
  if account ~= nil and CRITICAL_ACCOUNTS[account] then
    return true
  end
  local qos = job_desc.qos or job_desc.default_qos
  return qos ~= nil and CRITICAL_QOS[qos] == true
end

-- (code, message to the user) for a submission, or nil when it may go ahead.
local function judge_submit(job_desc)
  local parts, why = split(job_desc.comment)
  if parts == nil then
    return slurm.ERROR, why
  end
  if parts.intent ~= nil then
    local class, reason = check_intent(parts.intent, os.time())
    if class == nil then
      return slurm.ERROR, reason
    end
    if class == "critical" and not critical_granted(job_desc) then
      return slurm.ESLURM_ACCESS_DENIED, string.format(
        "the class 'critical' (c=critical) is not granted to user %s, account %s or QOS %s; "
          .. "ask your Slurm administrator, or submit without it",
        shown(tostring(job_desc.user_name or job_desc.user_id)),
        shown(tostring(job_desc.account or "(default)")),
        shown(tostring(job_desc.qos or "(default)")))
    end
  end
  if parts.progress ~= nil then
    local ok, reason = check_progress(parts.progress)
    if not ok then
      return slurm.ERROR, reason
    end
  end
  return nil
end

-- (code, message for the log) for a comment update, or nil when it may go ahead.
local function judge_modify(new, old)
  local parts, why = split(new)
  if parts == nil then
    return slurm.ERROR, why
  end
  -- A malformed tag in the old comment (split gives nil) counts as an intent that differs.
  local before = split(old)
  if before == nil or intent_key(before) ~= intent_key(parts) then
    return slurm.ESLURM_ACCESS_DENIED,
        "the slurm-rl intent {rl1:...} is fixed at submission; only an operator may add, "
          .. "change or remove it"
  end
  if parts.progress ~= nil then
    local ok, reason = check_progress(parts.progress)
    if not ok then
      return slurm.ERROR, reason
    end
  end
  return nil
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local comment = job_desc.comment
  if comment == nil or not has_tag(comment) or OPERATOR_UIDS[submit_uid] then
    return slurm.SUCCESS
  end
  local ok, code, message = pcall(judge_submit, job_desc)
  if not ok then
    slurm.log_error("slurm-rl: job_submit.lua failed on a tagged comment: %s", tostring(code))
    code, message = slurm.ERROR, "internal error while checking the slurm-rl tag; "
        .. "please tell your Slurm administrator"
  end
  if code == nil then
    return slurm.SUCCESS
  end
  slurm.log_user("%s", "slurm-rl: " .. message)
  slurm.log_info("slurm-rl: refused a job of uid %s: %s", tostring(submit_uid), message)
  return code
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  local new = job_desc.comment
  if new == nil or OPERATOR_UIDS[modify_uid] then
    return slurm.SUCCESS
  end
  local old = job_rec.comment or ""
  if not has_tag(new) and not has_tag(old) then
    return slurm.SUCCESS
  end
  local ok, code, message = pcall(judge_modify, new, old)
  if not ok then
    slurm.log_error("slurm-rl: job_submit.lua failed on a comment update: %s", tostring(code))
    code, message = slurm.ERROR, "internal error"
  end
  if code == nil then
    return slurm.SUCCESS
  end
  -- Slurm 22.05 discards log_user() in job_modify: the user sees only the error code's text.
  slurm.log_info("slurm-rl: refused a comment update of job %s by uid %s: %s",
                 tostring(job_rec.job_id), tostring(modify_uid), message)
  return code
end

slurm.log_info("slurm-rl: job_submit.lua loaded (critical granted to 1 users, 1 accounts, 1 QOS; horizon 7776000 s; 1 operator uids)")
return slurm.SUCCESS
