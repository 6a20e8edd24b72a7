-- Argo CD health of an agentrun.dev ResearchRun (resource.customizations.health.agentrun.dev_ResearchRun).
-- It reads what the operator writes in the same status write as the phase (docs/api.md, kstatus):
--   not Terminated: Progressing (Suspended while a tool call waits for an approval);
--   Terminated with Ready=True: Healthy; Terminated with Stalled=True: Degraded.
local hs = {}
local function condition(obj, type)
  if obj.status ~= nil and obj.status.conditions ~= nil then
    for _, c in ipairs(obj.status.conditions) do
      if c.type == type then
        return c
      end
    end
  end
  return nil
end

if obj.status == nil or obj.status.phase == nil or obj.status.phase == "" then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to admit the run"
  return hs
end

local phase = obj.status.phase
local message = obj.status.message or ""
if phase ~= "Terminated" then
  local awaiting = condition(obj, "AwaitingApproval")
  if awaiting ~= nil and awaiting.status == "True" then
    hs.status = "Suspended"
    hs.message = phase .. ": " .. (awaiting.message or "a tool call waits for an approval")
    return hs
  end
  hs.status = "Progressing"
  hs.message = phase
  if message ~= "" then
    hs.message = phase .. ": " .. message
  end
  return hs
end

local reason = obj.status.reason or ""
local stalled = condition(obj, "Stalled")
local ready = condition(obj, "Ready")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
elseif ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
else
  hs.status = "Degraded"
end
hs.message = "Terminated (" .. reason .. ")"
if message ~= "" then
  hs.message = hs.message .. ": " .. message
end
return hs
