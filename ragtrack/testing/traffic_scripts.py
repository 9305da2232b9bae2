"""What the seeded production traffic is made of: the problems users hit and the questions they ask anyway.

Written by hand for the two shipped knowledge bases (``golden/kb`` in English,
``examples/zh-kb`` in Chinese); :mod:`ragtrack.testing.traffic` turns a script
into a deterministic plan. A **problem** is one question the app answers badly,
asked in paraphrased near-duplicate forms by several users: its ground-truth
passages, the golden item that already covers it (or None), what the app
retrieved instead and what it said, and what users wrote when they disliked
it. A **topic** is a question the app answers well from its passages (the
answer is taken from the first passage at plan time). **Out of scope** are
questions the knowledge base cannot answer: the app retrieves nothing and
refuses.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProblemScript:
    key: str
    type: str  # the golden type a reviewer would give it (A/B/C/D)
    gt: tuple[str, ...]  # canonical passage IDs that answer it
    questions: tuple[str, ...]  # paraphrases, as users type them
    retrieved: tuple[str, ...]  # what the app retrieved instead (empty: nothing)
    answer: str  # what the app answered
    comments: tuple[str, ...]  # what disliking users wrote
    covered_by: str | None = None  # the shipped golden item that already asks it


@dataclass(frozen=True)
class TopicScript:
    passages: tuple[str, ...]
    questions: tuple[str, ...]


@dataclass(frozen=True)
class Script:
    corpus: str  # relative to the repository root
    golden: str
    app: str  # the app's name, as its versions are tagged (``<app>-v1``, ``<app>-v2``)
    refusal: str  # what the app says when it retrieved nothing
    problems: tuple[ProblemScript, ...]
    topics: tuple[TopicScript, ...]
    out_of_scope: tuple[str, ...]
    stray_comments: tuple[str, ...]  # a lone user's dislike of a good answer
    like_comments: tuple[str, ...]


_MGR = "custom-nodes/comfyui-manager.md#comfyui-manager/"
_LORA = "models/lora-basics.md#lora-basics/"
_INSTALL = "basics/installing-comfyui.md#installing-comfyui/"
_SAVE = "nodes/saving-and-loading-workflows.md#saving-and-loading-workflows/"
_SLOW = "troubleshooting/slow-generation.md#slow-generation/"
_VRAM = "models/vram-requirements.md#vram-requirements/"
_OOM = "troubleshooting/out-of-memory.md#fixing-out-of-memory-errors/"
_LATENT = "nodes/latent-and-vae-nodes.md#latent-and-vae-nodes/"

ENGLISH = Script(
    corpus="golden/kb",
    golden="golden/golden.jsonl",
    app="helpdesk",
    refusal="I could not find this in the knowledge base.",
    problems=(
        ProblemScript(
            key="manager-button-missing",
            type="A",
            gt=(_MGR + "when-the-manager-button-is-missing",),
            questions=(
                "I installed ComfyUI-Manager but the Manager button never shows up. What's wrong?",
                "The Manager button is missing after I installed ComfyUI-Manager, how do I fix it?",
                "ComfyUI-Manager is installed, yet there is no Manager button in the menu. Why?",
                "Why don't I see the Manager button after installing ComfyUI-Manager?",
                "no Manager button after installing ComfyUI-Manager",
                "I cloned ComfyUI-Manager and restarted, but the Manager button still does not appear.",
            ),
            retrieved=(_MGR + "installing-comfyui-manager", _MGR + "installing-node-packs-by-name"),
            answer="Open a terminal in custom_nodes and clone the ComfyUI-Manager repository, then restart "
            "ComfyUI and reload the browser tab.",
            comments=(
                "I did exactly that already, the button is still missing.",
                "It just repeats the install steps.",
                "Doesn't help, it is installed.",
                "Not what I asked.",
            ),
        ),
        ProblemScript(
            key="lora-no-effect",
            type="A",
            gt=(_LORA + "trigger-words",),
            questions=(
                "My LoRA does almost nothing even at strength 1.0. Why?",
                "The LoRA has no visible effect on my images even at strength 1.0, what am I missing?",
                "Why does my character LoRA not change the picture at all, even at strength 1.0?",
                "My LoRA is loaded at strength 1.0 but the output looks the same as without it.",
                "LoRA does nothing at strength 1.0",
                "I added a style LoRA at strength 1.0 and the images look unchanged. How do I make it work?",
            ),
            retrieved=(_LORA + "strength-values", _LORA + "folder-and-load-lora-node"),
            answer="Load LoRA has two strength settings, strength_model and strength_clip, and both default to 1.0; "
            "raise strength_model to make the LoRA stronger.",
            comments=(
                "Strength is already 1.0, read the question.",
                "It never mentions what actually makes a LoRA work.",
                "Useless.",
            ),
        ),
        ProblemScript(
            key="access-from-other-devices",
            type="A",
            gt=(_INSTALL + "access-from-other-devices",),
            questions=(
                "How can I open ComfyUI from another device on my home network?",
                "How do I open ComfyUI from my phone on the same home network?",
                "ComfyUI only opens on the PC it runs on. How do I open it from another device on my network?",
                "How can I open ComfyUI from my laptop on my home network while it runs on my desktop?",
                "open ComfyUI from another device on my home network",
                "Other devices on my home network cannot open ComfyUI on port 8188. How do I open it from them?",
            ),
            retrieved=(_INSTALL + "starting-the-server",),
            answer="Start ComfyUI with python main.py and open http://127.0.0.1:8188 in a browser.",
            comments=(
                "127.0.0.1 only works on the PC itself.",
                "That address does not work on my phone.",
                "Wrong, I asked about other devices.",
            ),
        ),
        ProblemScript(
            key="workflow-from-png",
            type="B",
            gt=(_SAVE + "workflow-metadata-in-png-files", _SAVE + "loading-a-workflow-by-drag-and-drop"),
            questions=(
                "How do I get the workflow back out of a PNG that ComfyUI made?",
                "Can I load the workflow that made an image from its PNG file?",
                "How do I restore a workflow from a PNG image ComfyUI generated?",
                "Someone sent me a ComfyUI PNG. How do I open the workflow stored in the image?",
                "load the workflow from a ComfyUI PNG",
                "I dragged a ComfyUI PNG from a website onto the canvas and no workflow loaded. How is loading a "
                "workflow from a PNG supposed to work?",
            ),
            retrieved=(_SAVE + "saving-workflows-as-json",),
            answer="In the Workflow menu, Save stores the current graph in ComfyUI's workflow library, and Export "
            "downloads it as a .json file.",
            comments=(
                "I asked about the PNG, not about saving JSON.",
                "Does not explain why the picture loads nothing.",
                "Wrong topic.",
            ),
        ),
        ProblemScript(
            key="flux-slow-fp8-vram",
            type="C",
            gt=(_SLOW + "flux-is-much-slower-per-step", _VRAM + "flux-dev-fp8"),
            questions=(
                "Flux dev is very slow per step compared with SD1.5. Is that normal, and how much VRAM does the "
                "fp8 Flux model need?",
                "Why is each Flux step so much slower than SD1.5, and how much VRAM do I need for Flux in fp8?",
                "Flux takes seconds per step while SD1.5 was fast. Is that normal? And how much VRAM does fp8 "
                "Flux need?",
                "is slow Flux normal compared to SD1.5, and VRAM needed for Flux fp8",
                "Flux is much slower per step than my SD1.5 models. Is that expected, and how much VRAM does "
                "the fp8 version need?",
            ),
            retrieved=(),
            answer="I could not find this in the knowledge base.",
            comments=(
                "It says it can't find it, but the docs cover Flux.",
                "No answer at all.",
                "Please fix, this keeps happening with Flux questions.",
            ),
        ),
        ProblemScript(
            key="tiled-vae-decode-oom",
            type="A",
            gt=(_OOM + "out-of-memory-during-vae-decode",),
            covered_by="A02",
            questions=(
                "VAE Decode (Tiled) still runs out of memory with the default settings. What value should I change?",
                "Even with VAE Decode (Tiled) the decode runs out of memory at the default settings. Which value "
                "do I change, and to what?",
                "I already use VAE Decode (Tiled) and the decode still runs out of memory. What should I change?",
                "VAE Decode (Tiled) runs out of memory with default settings, which value do I change?",
                "tiled VAE decode still out of memory with the default settings, what to change",
            ),
            retrieved=(_LATENT + "tiled-vae-decoding",),
            answer="VAE Decode (Tiled) decodes the latent in overlapping tiles instead of all at once, which keeps "
            "memory use low.",
            comments=(
                "I already use the tiled node, that's the point.",
                "Doesn't say what to change.",
                "Same out of memory error, no help.",
            ),
        ),
    ),
    topics=(
        TopicScript(
            ("basics/folder-layout.md#comfyui-folder-layout/refreshing-model-lists",),
            (
                "I copied a new checkpoint into the models folder but it does not show in the loader dropdown.",
                "A new checkpoint file I just copied is not listed in Load Checkpoint. Do I have to restart?",
            ),
        ),
        TopicScript(
            ("models/flux-schnell.md#flux-1-schnell/steps-and-sampler-settings",),
            ("What KSampler settings should I use for FLUX.1 schnell?", "How many steps does Flux schnell need?"),
        ),
        TopicScript(
            ("basics/interface-and-shortcuts.md#comfyui-interface-and-shortcuts/bypass-versus-mute",),
            ("What is the difference between bypass and mute?", "Should I bypass or mute a node to switch it off?"),
        ),
        TopicScript(
            ("models/sdxl-base-and-refiner.md#sdxl-base-and-refiner/sdxl-resolutions",),
            ("What resolution should I use with SDXL?", "Which image sizes work best for SDXL?"),
        ),
        TopicScript(
            ("nodes/ksampler.md#ksampler-node/the-seven-widgets/cfg",),
            ("What does cfg do in the KSampler?", "What is a good cfg value?"),
        ),
        TopicScript(
            ("nodes/samplers-and-schedulers.md#samplers-and-schedulers/euler-and-euler-ancestral",),
            ("What is the difference between euler and euler_ancestral?", "Is euler_a better than euler?"),
        ),
        TopicScript(
            (
                "custom-nodes/installing-custom-nodes.md#how-to-install-custom-nodes-manually/"
                "clone-the-pack-into-the-custom-nodes-folder",
            ),
            ("How do I install a custom node pack by hand?", "How do I clone a node pack into custom_nodes?"),
        ),
        TopicScript(
            ("models/checkpoint-files-and-formats.md#checkpoint-files-and-formats/safetensors-and-ckpt",),
            ("Should I download .safetensors or .ckpt files?", "Why is safetensors preferred over ckpt?"),
        ),
        TopicScript(
            (_LORA + "what-a-lora-is",),
            ("What is a LoRA?", "What does a LoRA file actually contain?"),
        ),
        TopicScript(
            (_LORA + "folder-and-load-lora-node",),
            ("Where do I put LoRA files?", "Which folder do LoRAs go in, and which node loads them?"),
        ),
        TopicScript(
            ("models/vae-files.md#vae-files/what-the-vae-does",),
            ("What does the VAE do?", "What is the VAE for in Stable Diffusion?"),
        ),
        TopicScript(
            ("workflows/inpainting.md#inpainting-in-comfyui/vae-encode-for-inpainting",),
            ("How does VAE Encode (for Inpainting) work?", "What is grow_mask_by in VAE Encode for Inpainting?"),
        ),
        TopicScript(
            ("workflows/img2img.md#image-to-image-img2img-in-comfyui/recommended-denoise-ranges",),
            ("What denoise should I use for img2img?", "Which denoise range keeps my picture's composition?"),
        ),
        TopicScript(
            ("workflows/upscaling-and-hires-fix.md#upscaling-and-hires-fix/model-based-upscaling",),
            ("How do I upscale an image with an upscale model?", "How does Upscale Image (using Model) work?"),
        ),
        TopicScript(
            ("workflows/controlnet.md#controlnet-in-comfyui/wiring-the-nodes",),
            ("How do I wire the ControlNet nodes?", "Where does Apply ControlNet go in the graph?"),
        ),
        TopicScript(
            ("workflows/controlnet-preprocessors.md#controlnet-preprocessors/line-and-edge-maps/canny",),
            ("What does the Canny preprocessor do?", "What are the Canny thresholds for?"),
        ),
        TopicScript(
            ("workflows/ipadapter.md#ipadapter-in-comfyui/what-an-image-prompt-does",),
            ("What is IPAdapter for?", "How is an image prompt different from a text prompt?"),
        ),
        TopicScript(
            (_INSTALL + "portable-windows-build",),
            ("How do I install the portable ComfyUI on Windows?", "Where do I get the Windows portable build?"),
        ),
        TopicScript(
            (_INSTALL + "updating-comfyui",),
            ("How do I update ComfyUI?", "What is the right way to update my ComfyUI install?"),
        ),
        TopicScript(
            (_INSTALL + "memory-launch-flags",),
            ("What do --lowvram and --highvram do?", "Which launch flags reduce memory use?"),
        ),
        TopicScript(
            ("nodes/batch-and-seeds.md#batches-and-seeds/batch-size-in-the-latent",),
            ("How do I generate several images at once?", "What does batch_size in Empty Latent Image do?"),
        ),
        TopicScript(
            (_SAVE + "filename-prefix-and-subfolders",),
            ("How do I save images into a subfolder?", "What does filename_prefix in Save Image do?"),
        ),
        TopicScript(
            (_SAVE + "exporting-in-api-format",),
            ("How do I export a workflow in API format?", "What is the API format of a workflow for?"),
        ),
        TopicScript(
            (
                "troubleshooting/black-images-and-artifacts.md#black-images-and-visual-artifacts/"
                "why-images-come-out-black",
            ),
            ("Why do my images come out completely black?", "What causes black images in ComfyUI?"),
        ),
        TopicScript(
            (
                "troubleshooting/missing-nodes-and-errors.md#missing-nodes-and-common-error-messages/"
                "red-outlined-nodes-after-loading-a-workflow",
            ),
            ("Nodes show up red after loading a workflow. What does that mean?", "Why are some nodes outlined red?"),
        ),
        TopicScript(
            ("nodes/prompting-and-conditioning.md#prompting-and-conditioning/weighting-words",),
            ("How do I give a word more weight in my prompt?", "What does (word:1.2) mean in a prompt?"),
        ),
        TopicScript(
            ("models/textual-inversion-embeddings.md#textual-inversion-embeddings/using-an-embedding-in-a-prompt",),
            ("How do I use an embedding in my prompt?", "What is the syntax for a textual inversion embedding?"),
        ),
        TopicScript(
            ("models/text-encoders.md#text-encoders/dualcliploader",),
            ("How do I use DualCLIPLoader for Flux?", "Which type do I pick in DualCLIPLoader?"),
        ),
        TopicScript(
            ("workflows/outpainting.md#outpainting-in-comfyui/how-much-to-extend-at-once",),
            ("How much can I extend an image at once when outpainting?", "How many pixels per outpaint step?"),
        ),
        TopicScript(
            ("basics/interface-and-shortcuts.md#comfyui-interface-and-shortcuts/reroute-nodes",),
            ("What are reroute nodes for?", "How do I tidy up long links in the graph?"),
        ),
    ),
    out_of_scope=(
        "Can ComfyUI edit videos in Premiere?",
        "What GPU should I buy for gaming?",
        "Write me a poem about cats.",
        "How do I reset my Windows password?",
    ),
    stray_comments=("Too long.", "Not what I meant.", "Meh."),
    like_comments=("Thanks!", "Exactly what I needed.", "Worked."),
)

_ERR = "troubleshooting-error-codes.txt#"
_FAQ = "faq.md#青禾智能常见问题/"
_MINI = "gateway-mini-manual.txt#"
_PRO = "gateway-pro-manual.txt#"
_APP = "qinghe-app-guide.md#青禾家-app-使用指南/"

CHINESE = Script(
    corpus="examples/zh-kb/docs",
    golden="examples/zh-kb/golden.jsonl",
    app="qinghe-bot",
    refusal="抱歉，知识库中没有找到相关内容。",
    problems=(
        ProblemScript(
            key="door-sensor-offline-e502",
            type="A",
            gt=(_ERR + "子设备类错误/e502-门窗传感器离线",),
            questions=(
                "门窗传感器一直显示离线，App 报 E502，怎么办？",
                "E502 是什么错误？门窗传感器离线了怎么处理？",
                "门窗传感器在 App 里离线好几天了，提示 E502，怎么恢复？",
                "门窗传感器报 E502 离线",
                "我的门窗传感器总是离线，错误码 E502，要怎么处理？",
            ),
            retrieved=("door-sensor-manual.txt#重置与重新配对",),
            answer="长按配对键 10 秒，直到指示灯红色闪烁 3 次后松开，传感器即恢复出厂设置，然后重新配对。",
            comments=("恢复出厂以后问题还在，设置也全没了。", "答非所问，E502 到底是什么原因？", "没用。"),
        ),
        ProblemScript(
            key="offline-internet",
            type="A",
            gt=(_FAQ + "日常使用/外网断了-设备还能用吗",),
            questions=(
                "家里外网断了，青禾的设备还能用吗？",
                "外网断了以后，青禾设备还能正常用吗？",
                "宽带欠费外网断了，门窗传感器和插座还能用吗？",
                "外网断开的时候青禾设备还能用吗？",
                "外网断了设备还能用么",
            ),
            retrieved=(),
            answer="抱歉，知识库中没有找到相关内容。",
            comments=("说明书里明明写了断网的情况。", "什么都没回答。", "这个问题很常见，怎么会查不到？"),
        ),
        ProblemScript(
            key="new-router-readd",
            type="A",
            gt=(_FAQ + "日常使用/换了路由器或改了-wi-fi-密码-要重新添加设备吗",),
            questions=(
                "换了新路由器，所有设备都要重新添加吗？",
                "改了 Wi-Fi 密码以后，设备要重新添加吗？",
                "换了路由器以后，网关和子设备都要重新添加吗？",
                "修改 Wi-Fi 密码后需要重新添加设备吗",
                "家里换了路由器又改了 Wi-Fi 密码，青禾设备要全部重新添加吗？",
            ),
            retrieved=(_MINI + "复位孔的使用/恢复出厂设置",),
            answer="用卡针按住复位孔 8 秒以上，直到指示灯变为黄色快闪后松开，网关会恢复出厂设置并重新进入配网状态。",
            comments=("照做以后所有子设备都要重新配对，太坑了。", "不该让我恢复出厂设置。", "错误的建议。"),
        ),
        ProblemScript(
            key="plug-energy-mismatch",
            type="A",
            gt=(_FAQ + "日常使用/为什么插座统计的用电量和电表读数对不上",),
            questions=(
                "插座统计的用电量为什么和电表读数对不上？",
                "智能插座显示的用电量和家里电表读数对不上，为什么？",
                "插座统计的用电量比电表读数少很多，是插座坏了吗？",
                "插座用电量和电表读数对不上",
                "为什么 App 里插座统计的用电量跟电表读数差那么多？",
            ),
            retrieved=("smart-plug-manual.txt#产品概述/技术规格",),
            answer="插座的计量精度为 ±2%。",
            comments=("只说了精度，没解释为什么差这么多。", "差了一大半，不是 2% 的问题。", "没回答我的问题。"),
        ),
        ProblemScript(
            key="transfer-device-warranty",
            type="C",
            gt=(_FAQ + "账号与安全/设备转让或送人之前需要做什么", _APP + "电子保修卡"),
            questions=(
                "我想把网关送给朋友，送之前要做什么？电子保修卡会跟着转过去吗？",
                "设备转让给别人之前要怎么处理？电子保修卡能转给对方吗？",
                "网关卖二手之前要做什么？电子保修卡怎么转给新主人？",
                "设备送人之前要做什么，电子保修卡会怎样",
                "把青禾设备转让给别人，之前需要做什么？电子保修卡会一起转过去吗？",
            ),
            retrieved=("warranty-policy.md#青禾智能产品保修政策/保修凭证",),
            answer="申请保修时，请提供订单号、发票或者已经在 App 中登记的电子保修卡。",
            comments=("没说送人之前要做什么。", "我问的是转让，不是申请保修。", "不对。"),
        ),
        ProblemScript(
            key="zigbee-limit-e202",
            type="A",
            gt=(_ERR + "子设备容量类错误/e202-zigbee-子设备数量已达上限",),
            covered_by="zh-a2",
            questions=(
                "App 里提示 E202 是什么意思？该怎么处理？",
                "App 提示 E202 是什么意思？怎么处理？",
                "App 里一直提示 E202，这是什么意思？要怎么处理？",
                "提示 E202 是什么意思，该怎么处理",
                "添加子设备时 App 提示 E202 是什么意思？该怎么处理？",
            ),
            retrieved=(_ERR + "子设备容量类错误/e201-子设备总数已达上限",),
            answer="网关下已添加的子设备总数达到了该型号的上限，请在 App 中删除不再使用的子设备。",
            comments=("说的是 E201 吧，我问的是 E202。", "我的子设备总数根本没到上限。", "不对。"),
        ),
    ),
    topics=(
        TopicScript(
            (_MINI + "产品概述/技术规格",), ("网关 Mini 最多能接多少个子设备？", "Mini 网关支持 5GHz Wi-Fi 吗？")
        ),
        TopicScript(
            ("door-sensor-manual.txt#更换电池",), ("门窗传感器怎么换电池？", "门窗传感器换电池后要重新配对吗？")
        ),
        TopicScript((_MINI + "复位孔的使用/重新配网",), ("网关 Mini 怎么重新配网？", "Mini 复位孔按 3 秒是做什么？")),
        TopicScript(
            (_PRO + "指示灯与按键/光环状态说明",), ("Pro 网关光环紫色慢闪是什么意思？", "Pro 的光环黄色常亮代表什么？")
        ),
        TopicScript(
            (_PRO + "备用电池/断电续航",), ("停电以后 Pro 网关还能用多久？", "Pro 网关的备用电池能撑多长时间？")
        ),
        TopicScript(
            ("smart-plug-manual.txt#安全保护/过载保护",),
            ("插座红灯快闪自己断电了，怎么回事？", "插座提示 E601 怎么恢复？"),
        ),
        TopicScript(("smart-plug-manual.txt#功能说明/童锁",), ("插座的童锁怎么开？", "开了童锁以后插座按键还能用吗？")),
        TopicScript(
            ("smart-plug-manual.txt#功能说明/断电记忆",), ("停电后插座会自己打开吗？", "怎么让插座来电后总是开启？")
        ),
        TopicScript(
            ("firmware-update.md#青禾设备固件升级指南/在-app-中升级/开启自动更新",),
            ("固件自动更新在哪里打开？", "自动更新一般什么时候升级？"),
        ),
        TopicScript(
            ("firmware-update.md#青禾设备固件升级指南/升级失败与救援模式/网关-mini-救援模式",),
            ("Mini 网关升级失败了怎么进入救援模式？", "网关 Mini 救援模式怎么操作？"),
        ),
        TopicScript((_APP + "家庭与成员/邀请成员",), ("怎么邀请家人一起控制设备？", "一个家庭最多能有多少个成员？")),
        TopicScript((_APP + "自动化/创建自动化",), ("怎么创建一个自动化？", "开门时自动开灯怎么设置？")),
        TopicScript((_APP + "网关备份与迁移",), ("网关怎么备份？", "能从 Mini 迁移到 Pro 吗？")),
        TopicScript((_APP + "消息与通知",), ("勿扰模式下安防消息还会推送吗？", "怎么设置消息勿扰时段？")),
        TopicScript(
            ("warranty-policy.md#青禾智能产品保修政策/保修期限/网关类产品",),
            ("网关保修几年？", "Pro 的备用电池保修多久？"),
        ),
        TopicScript(
            ("warranty-policy.md#青禾智能产品保修政策/不在保修范围内的情况",),
            ("哪些情况不在保修范围内？", "摔坏了还能免费保修吗？"),
        ),
        TopicScript(("after-sales-service-notes.txt~p11",), ("寄修的流程是怎样的？", "寄修多久能检测完？")),
        TopicScript(
            ("network-setup-guide.md#家庭网络配置建议/路由器要求/加密与认证方式",),
            ("路由器用什么加密方式比较好？", "酒店那种网页登录的 Wi-Fi 能用吗？"),
        ),
        TopicScript(
            ("network-setup-guide.md#家庭网络配置建议/多网关组网",),
            ("一个家最多能加几台网关？", "Mini 和 Pro 能混用吗？"),
        ),
        TopicScript(
            (_FAQ + "选购与兼容/青禾设备支持-matter-吗",),
            ("青禾设备支持 Matter 吗？", "Pro 网关怎么开启 Matter 桥接？"),
        ),
        TopicScript(
            (_FAQ + "日常使用/门窗传感器的开合记录能保存多久",),
            ("门窗传感器的开合记录能保存多久？", "开合记录能导出吗？"),
        ),
        TopicScript(
            ("door-sensor-manual.txt#首次使用/安装位置",),
            ("门窗传感器应该怎么贴？", "门窗传感器和磁铁的间距多少合适？"),
        ),
    ),
    out_of_scope=("今天天气怎么样？", "帮我写一首关于春天的诗。", "手机屏幕碎了去哪里修？"),
    stray_comments=("太长了。", "不是我想问的。", "一般。"),
    like_comments=("谢谢！", "解决了。", "很清楚。"),
)

SCRIPTS: dict[str, Script] = {"en": ENGLISH, "zh": CHINESE}
